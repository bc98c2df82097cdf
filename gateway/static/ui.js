// The operator page: reads /admin/overview and /admin/history (with the session
// cookie) every few seconds; the charts are history.js and charts.js.
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

// An empty table says so, in one row across its columns.
function fill(id, rows, none) {
  const body = document.querySelector("#" + id + " tbody");
  if (!rows.length) {
    const td = document.createElement("td");
    td.className = "empty";
    td.colSpan = document.querySelectorAll("#" + id + " thead th").length;
    td.textContent = none;
    const tr = document.createElement("tr");
    tr.append(td);
    body.replaceChildren(tr);
    return;
  }
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
  }), "No answered requests yet.");
  fill("models", o.models.map((m) => {
    const k = `models|${m.pool}|${m.model}`;
    return [cell(null, m.pool, "text"), cell(null, m.model, "text", "t"),
            cell(k + "|requests", m.requests, "int"), cell(k + "|client_errors", m.client_errors, "int"),
            cell(k + "|rate_limited", m.rate_limited, "int"), cell(k + "|errors", m.errors, "int"),
            cell(k + "|ttft_p50_s", m.ttft_p50_s, "ms"), cell(k + "|ttft_p95_s", m.ttft_p95_s, "ms"),
            cell(k + "|tpot_p95_s", m.tpot_p95_s, "ms"), cell(k + "|slo_attainment", m.slo_attainment, "pct")];
  }), "No requests yet.");
  fill("teams", o.teams.map((t) => {
    const k = `teams|${t.team}`;
    const limit = t.daily_limit_usd;
    return [cell(null, t.team, "text"), cell(k + "|spent_today_usd", t.spent_today_usd, "usd"),
            cell(k + "|daily_limit_usd", limit, "usd"), cell(k + "|remaining_usd", t.remaining_usd, "usd"),
            limit ? bar(t.spent_today_usd / limit, t.soft_limited) : cell(null, "no daily limit", "text", "t muted")];
  }), "No teams configured.");
  const reasons = [];
  for (const [kind, table] of [["escalation", o.escalations], ["fallback", o.fallbacks]]) {
    for (const [reason, n] of Object.entries(table)) {
      reasons.push([cell(null, kind, "text"), cell(null, reason, "text", "t"),
                    cell(`${kind}s|${reason}`, n, "int")]);
    }
  }
  fill("reasons", reasons, "No escalations or fallbacks since start.");
  fill("breakers", o.now.map((m) =>
    [cell(null, m.model, "text"), cell(`breakers|${m.model}`, m.breaker, "text", "t state-" + m.breaker),
     cell(`now|${m.model}|in_flight`, m.in_flight, "int"),
     cell(`now|${m.model}|queued_interactive`, m.queued_interactive, "int"),
     cell(`now|${m.model}|queued_batch`, m.queued_batch, "int")]), "No models configured.");
  fill("batches", o.batches.map((b) => {
    const k = `batches|${b.id}`;
    const id = document.createElement("td");     // a long id is cut, whole on hover
    const span = document.createElement("span");
    span.className = "id";
    span.textContent = span.title = b.id;
    id.append(span);
    return [id, cell(null, b.team, "text", "t"),
            cell(k + "|status", b.status, "text", "t"), cell(k + "|completed", b.completed, "int"),
            cell(k + "|failed", b.failed, "int"), cell(k + "|total", b.total, "int")];
  }), "No batches in progress.");
  const updated = document.getElementById("updated");
  updated.textContent = "updated " + new Date(o.generated_at * 1000).toLocaleString([], {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    second: "2-digit", timeZoneName: "short" });
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
      // The last hour (or the history kept, when that is shorter).
      const hist = await fetch("/admin/history?minutes=60",
                               { credentials: "same-origin", cache: "no-store" });
      if (hist.ok) renderHistory(await hist.json());
    }
  } catch (err) {
    document.getElementById("updated").textContent = "gateway unreachable";
  }
  setTimeout(refresh, REFRESH_MS);
}

refresh();
