"""The product's commands of ``routegate`` (the whole command is ``routegate/cli.py``).

    routegate serve --config config/routegate.yaml --port 8080
    routegate check-config config/routegate.yaml
    routegate hash-key sk-my-team-key
    routegate report --since 1h [--json]               # per team and model
    routegate worker                                   # the Batch API worker alone
    echo '{"id": 1, "prompt": "hi"}' | routegate classify

``python -m gateway.cli`` runs these alone; the lab's (train, eval,
calibrate, learn) and the load tests' join them in ``routegate``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from classifiers.classify_command import register_classify
from classifiers.complexity import ArtifactError, ComplexityModel
from core.config import ConfigError, GatewayConfig, load_config
from gateway.app import CONFIG_ENV, DEFAULT_CONFIG, serving_app
from gateway.auth import hash_key
from gateway.observe.startup import LISTEN_ENV
from gateway.observe.telemetry import MULTIPROC_ENV, fresh_metrics_dir
from gateway.server import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_UPLOAD_TIMEOUT_S,
    RequestLimits,
    uvicorn_options,
)
from gateway.state import Classifiers, artifact_stamp
from policies import POLICIES, get_policy


def load_checked_config(path: str) -> GatewayConfig:
    """``load_config`` plus what only this layer can check: that the routing
    policy exists and accepts the config (``core`` cannot import ``policies``),
    and that every classifier it names loads. ``serve`` and ``check-config``
    both go through here, so a config that passes ``check-config`` starts."""
    return load_checked(path)[0]


def load_checked(path: str) -> tuple[GatewayConfig, Classifiers]:
    """``load_checked_config``, and the classifiers it loaded to check them, by
    path (None: the shipped one), for a gateway in this process to start on."""
    config = load_config(path, check=policy_name_errors)
    try:
        get_policy(config.routing.auto_policy, config)
    except ValueError as exc:
        raise ConfigError(path, [("routing.auto_policy", str(exc))]) from None
    loaded, errors = check_classifiers(config)
    if errors:
        raise ConfigError(path, errors)
    return config, loaded


def check_classifiers(config: GatewayConfig) -> tuple[Classifiers, list[tuple[str, str]]]:
    """Loads ``routing.classifier`` and every ``teams[].classifier``, each artifact
    once: (those that loaded, with their stamps; the errors of those that did not,
    by key). At start-up an error stops it; a reload that meets one keeps the
    last good copy."""
    named = [(where, path) for where, path in
             [("routing.classifier", config.routing.classifier)]
             + [(f"teams[{i}].classifier", t.classifier) for i, t in enumerate(config.teams)]
             if path is not None]     # None: the shipped one, loaded at start
    loaded: Classifiers = {}
    problem: dict[str, str] = {}
    for _, path in named:
        if path not in loaded and path not in problem:
            stamp = artifact_stamp(path)    # before the read: a change after it reads again
            try:
                loaded[path] = (ComplexityModel.load(path), stamp)
            except ArtifactError as exc:
                problem[path] = str(exc)
    errors = [(where, problem[path]) for where, path in named if path in problem]
    return loaded, errors


def policy_name_errors(data: Any) -> list[tuple[str, str]]:
    """An unknown ``routing.auto_policy``, found in the raw data, so that it is
    reported with the schema's errors rather than after them."""
    routing = data.get("routing") if isinstance(data, dict) else None
    name = routing.get("auto_policy") if isinstance(routing, dict) else None
    if isinstance(name, str) and name not in POLICIES:
        return [("routing.auto_policy", f"unknown policy {name!r}; known: {sorted(POLICIES)}")]
    return []


def _load(path: str) -> tuple[GatewayConfig, Classifiers] | tuple[None, None]:
    """The config and its classifiers, or Nones after printing every error with its
    key path. Every command finds its config the same way: ``--config``, else
    ``ROUTEGATE_CONFIG``, else ``config/routegate.yaml`` in the working directory."""
    if path == DEFAULT_CONFIG and not os.path.exists(path):
        print(f"routegate: no config at {DEFAULT_CONFIG} (from {os.getcwd()}); pass --config "
              f"PATH, the file routegate serve runs with, or set {CONFIG_ENV}", file=sys.stderr)
        return None, None
    try:
        return load_checked(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return None, None


def seconds(text: str) -> float:
    """An argparse type: a positive number of seconds."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    config, checked = _load(args.config)
    if config is None or checked is None:
        return 2
    if args.workers > 1:
        # Each worker counts into files here and /metrics sums them, so a
        # scrape that lands on any worker sees the whole server.
        os.environ[MULTIPROC_ENV] = str(fresh_metrics_dir(config.data_dir))
    os.environ[CONFIG_ENV] = args.config
    os.environ[LISTEN_ENV] = f"http://{args.host}:{args.port}"
    os.environ.setdefault("ROUTEGATE_LOG_LEVEL", args.log_level)
    limits = RequestLimits.for_routes(args.max_header_bytes, args.header_timeout,
                                      args.body_timeout, args.upload_timeout)
    # One worker serves in this process, on the classifiers just checked; more are
    # processes of their own, each loading its copy.
    app = ("gateway.app:create_app_from_env" if args.workers > 1
           else serving_app(config, args.config, checked))
    uvicorn.run(app, factory=args.workers > 1, host=args.host, port=args.port,
                workers=args.workers, access_log=False, log_level="warning",
                timeout_graceful_shutdown=10, **uvicorn_options(limits),
                # The client's address is the TCP peer's: x-forwarded-for is believed only
                # from the proxies named (the admin guard counts guesses per address).
                proxy_headers=bool(args.trusted_proxies),
                forwarded_allow_ips=args.trusted_proxies or None)
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    config, _ = _load(args.path)
    if config is None:
        return 2
    print(f"{args.path}: ok ({len(config.models)} models, {len(config.teams)} teams, "
          f"auto policy {config.routing.auto_policy})")
    for note in config_notes(config):
        print(f"  warning: {note}")
    return 0


def config_notes(config: GatewayConfig) -> list[str]:
    """What a valid config may still get wrong at run time: a model's key not set, a
    quality target only a dear model reaches, a budget Redis that may evict its
    counters (when a Redis URL is set and answers)."""
    import asyncio

    from budget.eviction import eviction_risk
    from gateway.observe.startup import ability_notes, key_notes

    notes = key_notes(config) + ability_notes(config)
    url = config.effective_redis_url
    if url:
        async def read() -> str | None:
            from budget.redis_client import open_redis

            handle = await open_redis(url, Path(config.data_dir))
            try:
                return await eviction_risk(handle.client)
            finally:
                await handle.close()
        risk = asyncio.run(read())
        if risk is not None:
            refused = (config.budget.fail_policy == "fail_closed"
                       and not config.budget.allow_evicting_redis)
            notes.append(risk + ("; routegate serve refuses to start on it" if refused else ""))
    return notes


def cmd_hash_key(args: argparse.Namespace) -> int:
    print(hash_key(args.key))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """The batch worker without the HTTP server (``routegate worker --config PATH``)."""
    import asyncio
    import logging

    from gateway.batch_runner import run_worker

    config, checked = _load(args.config)
    if config is None:
        return 2
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(run_worker(config, args.config, checked))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Cost, failures and latency per team and model (``gateway/observe/report.py``)."""
    from core.durations import parse_since
    from gateway.observe.report import build_report, print_report

    config, _ = _load(args.config)
    if config is None:
        return 2
    report = build_report(config, parse_since(args.since), with_redis=not args.no_redis)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_report(report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The product's commands alone (``python -m gateway.cli``)."""
    parser = argparse.ArgumentParser(prog="routegate", description="Cost-aware model router gateway")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def register(sub: Any) -> None:
    """Add the product's subcommands (``routegate/cli.py`` adds the lab's beside them)."""
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--max-header-bytes", type=int, default=DEFAULT_MAX_HEADER_BYTES,
                       help="cap on request line + headers; larger heads get 431")
    serve.add_argument("--header-timeout", type=seconds, default=DEFAULT_HEADER_TIMEOUT_S,
                       help="seconds a request head may take to arrive")
    serve.add_argument("--body-timeout", type=seconds, default=DEFAULT_BODY_TIMEOUT_S,
                       help="seconds a whole request (head and body) may take to arrive; "
                       "then 408. /ui/login gets 5 s at most")
    serve.add_argument("--upload-timeout", type=seconds, default=DEFAULT_UPLOAD_TIMEOUT_S,
                       help="the same for POST /v1/files uploads (up to batch.max_file_bytes)")
    serve.add_argument("--trusted-proxies", default="",
                       help="comma-separated addresses of proxies whose x-forwarded-for names "
                       "the client (default: none; the TCP peer is the client)")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate a config file")
    check.add_argument("path", nargs="?", default=DEFAULT_CONFIG)
    check.set_defaults(func=cmd_check_config)

    hk = sub.add_parser("hash-key", help="print the sha256: form of an API key for config")
    hk.add_argument("key")
    hk.set_defaults(func=cmd_hash_key)

    worker = sub.add_parser("worker", help="run only the Batch API worker (no HTTP server)")
    worker.add_argument("--config", default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG))
    worker.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    worker.set_defaults(func=cmd_worker)

    report = sub.add_parser("report", help="cost, failures and TTFT per team and model")
    report.add_argument("--config", default=os.environ.get(CONFIG_ENV, DEFAULT_CONFIG))
    report.add_argument("--since", default="1h", help="window: 90s, 30m, 1h, 7d")
    report.add_argument("--json", action="store_true")
    report.add_argument("--no-redis", action="store_true", help="only the request log")
    report.set_defaults(func=cmd_report)

    register_classify(sub)


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = (parser or build_parser()).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ArtifactError as exc:   # --classifier / --artifact / --learned naming a bad one
        print(f"routegate {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
