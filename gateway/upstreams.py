"""One backend per configured model: the one place the product may reach the simulator.

    backends = build_backends(config)      # name -> Backend (backends/base.py)

A model with ``backend: openai_compat`` speaks to its upstream over HTTP
(``backends/openai_compat.py``, its own transport); ``anthropic`` speaks
Anthropic's Messages API (``backends/anthropic_messages/``); ``azure_openai`` is the
same protocol at an Azure deployment's URL (``backends/azure_openai.py``);
``bedrock`` is Amazon Bedrock's Converse API (``backends/bedrock/``, imported
only then: it needs botocore). One with ``backend: simulated`` is the
simulator in process (``sim/backend.py``), imported here only then: a config
of real upstreams never loads the simulator (``[tool.importlinter]`` in
``pyproject.toml`` allows this import alone).
"""

from __future__ import annotations

from backends.anthropic_messages import AnthropicBackend
from backends.base import Backend
from backends.openai_compat import OpenAICompatBackend
from core.config import GatewayConfig


def build_backends(config: GatewayConfig) -> dict[str, Backend]:
    backends: dict[str, Backend] = {}
    max_rest_s = config.breaker.max_rest_s
    for model in config.models:
        if model.backend == "simulated":
            from sim.backend import SimulatedBackend  # the lab's, imported only if used

            backends[model.name] = SimulatedBackend(model)
        elif model.backend == "openai_compat":
            backends[model.name] = OpenAICompatBackend(model, max_rest_s=max_rest_s)
        elif model.backend == "azure_openai":
            from backends.azure_openai import AzureOpenAIBackend

            backends[model.name] = AzureOpenAIBackend(model, max_rest_s=max_rest_s)
        elif model.backend == "bedrock":
            try:
                from backends.bedrock import BedrockBackend
            except ImportError as exc:
                raise RuntimeError("backend: bedrock needs botocore: pip install "
                                   "'routegate[bedrock]'") from exc
            backends[model.name] = BedrockBackend(model, max_rest_s=max_rest_s)
        elif model.backend == "anthropic":
            backends[model.name] = AnthropicBackend(model, max_rest_s=max_rest_s)
        else:
            raise NotImplementedError(f"backend {model.backend!r} (model {model.name!r})")
    return backends
