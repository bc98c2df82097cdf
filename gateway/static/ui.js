// The operator page: reads /admin/overview (with the session cookie) every few seconds.
"use strict";
const REFRESH_MS = 3000;

const fmt = {
  int: (v) => String(v),
  usd: (v) => v === null ? "-" : "$" + v.toFixed(4),
  ms: (v) => v === null ? "-" : Math.round(v * 1000) + " ms",
  pct: (v) => v === null ? "-" : (v * 100).toFixed(1) + "%",
  text: (v) => v === null ? "-" : String(v),
};

// One cell; data-k names the JSON value it shows (the UI test compares them).
function cell(key, value, kind, cls) {
  const td = document.createElement("td");
  td.textContent = fmt[kind](value);
  if (key) td.dataset.k = key;
  if (cls) td.className = cls;
  return td;
}

function bar(fraction, over) {
  const td = document.createElement("td");
  const span = document.createElement("span");
  span.className = over ? "bar over" : "bar";
  span.style.width = Math.max(2, Math.min(1, fraction) * 120) + "px";
  td.appendChild(span);
  return td;
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement("tr");
    tr.append(...cells);
    return tr;
  }));
}

function render(o) {
  fill("routing", o.routing.map((r) => {
    const k = `routing|${r.pool}|${r.model}|${r.reason}`;
    return [cell(null, r.pool, "text"), cell(null, r.model, "text", "t"),
            cell(null, r.reason, "text", "t"), cell(k + "|requests", r.requests, "int"),
            cell(k + "|share", r.share, "pct"), bar(r.share)];
  }));
  fill("models", o.models.map((m) => {
    const k = `models|${m.pool}|${m.model}`;
    return [cell(null, m.pool, "text"), cell(null, m.model, "text", "t"),
            cell(k + "|requests", m.requests, "int"), cell(k + "|errors", m.errors, "int"),
            cell(k + "|ttft_p50_s", m.ttft_p50_s, "ms"), cell(k + "|ttft_p95_s", m.ttft_p95_s, "ms"),
            cell(k + "|slo_attainment", m.slo_attainment, "pct")];
  }));
  fill("teams", o.teams.map((t) => {
    const k = `teams|${t.team}`;
    const limit = t.daily_limit_usd;
    return [cell(null, t.team, "text"), cell(k + "|spent_today_usd", t.spent_today_usd, "usd"),
            cell(k + "|daily_limit_usd", limit, "usd"), cell(k + "|remaining_usd", t.remaining_usd, "usd"),
            limit ? bar(t.spent_today_usd / limit, t.soft_limited) : cell(null, null, "text")];
  }));
  const reasons = [];
  for (const [kind, table] of [["escalation", o.escalations], ["fallback", o.fallbacks]]) {
    for (const [reason, n] of Object.entries(table)) {
      reasons.push([cell(null, kind, "text"), cell(null, reason, "text", "t"),
                    cell(`${kind}s|${reason}`, n, "int")]);
    }
  }
  fill("reasons", reasons);
  fill("breakers", Object.entries(o.breakers).map(([model, state]) =>
    [cell(null, model, "text"), cell(`breakers|${model}`, state, "text", "t state-" + state)]));
  fill("batches", o.batches.map((b) => {
    const k = `batches|${b.id}`;
    return [cell(null, b.id, "text"), cell(null, b.team, "text", "t"),
            cell(k + "|status", b.status, "text", "t"), cell(k + "|completed", b.completed, "int"),
            cell(k + "|failed", b.failed, "int"), cell(k + "|total", b.total, "int")];
  }));
  const updated = document.getElementById("updated");
  updated.textContent = "updated " + new Date(o.generated_at * 1000).toLocaleTimeString();
  updated.dataset.generated = String(o.generated_at);
}

async function refresh() {
  try {
    const resp = await fetch("/admin/overview", { credentials: "same-origin", cache: "no-store" });
    if (resp.status === 401) {
      document.getElementById("app").hidden = true;
      document.getElementById("login").hidden = false;
      document.getElementById("denied").hidden = location.hash !== "#denied";
      document.getElementById("throttled").hidden = location.hash !== "#throttled";
      return;
    }
    if (resp.ok) {
      document.getElementById("login").hidden = true;
      document.getElementById("app").hidden = false;
      render(await resp.json());
    }
  } catch (err) {
    document.getElementById("updated").textContent = "gateway unreachable";
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
