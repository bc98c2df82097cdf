// The operator page's last hour: /admin/history drawn with charts.js.
"use strict";

const CLASS_DASH = { "2xx": "", "4xx": "5 3", "429": "2 2", "5xx": "7 2 2 2", "other": "1 3" };
const fmtY = {
  rps: (v) => v >= 10 ? v.toFixed(0) : v.toFixed(2),
  ms: (v) => Math.round(v * 1000) + " ms",
  n: (v) => v >= 10 ? v.toFixed(0) : v.toFixed(1),
  usd: (v) => "$" + (v >= 1 ? v.toFixed(2) : v.toFixed(4)),
  pct: (v) => (v * 100).toFixed(v >= 0.1 ? 0 : 1) + "%",
};

function perSecond(h, counts) {
  return counts.map((c, i) => c / h.seconds[i]);
}

function requestSeries(h) {
  const byModel = new Map();       // "model class" -> counts summed over pools
  for (const r of h.requests) {
    const name = `${r.model} ${r.class}`;
    const sum = byModel.get(name) || { model: r.model, cls: r.class, counts: r.counts.map(() => 0) };
    r.counts.forEach((c, i) => { sum.counts[i] += c; });
    byModel.set(name, sum);
  }
  return [...byModel.entries()].sort().map(([name, s]) => ({
    name, values: perSecond(h, s.counts), color: colourOf(s.model), dash: CLASS_DASH[s.cls] || "",
  }));
}

function quantileSeries(rows) {
  const out = [];
  for (const r of rows.filter((r) => r.pool === "interactive")) {
    out.push({ name: `${r.model} p95`, values: r.p95_s, color: colourOf(r.model) },
             { name: `${r.model} p50`, values: r.p50_s, color: colourOf(r.model), dash: "4 3" });
  }
  return out;
}

function loadSeries(h) {
  return [
    ...h.queue.map((q) => ({ name: `${q.model} queued (${q.pool})`, values: q.peak,
                             color: colourOf(q.model), dash: q.pool === "batch" ? "4 3" : "" })),
    ...h.in_flight.map((f) => ({ name: `${f.model} in flight`, values: f.peak,
                                 color: colourOf(f.model), dash: "1 2" })),
  ];
}

function spendSeries(h) {
  return h.spend.map((t) => ({ name: t.team, values: t.spent_today_usd, color: colourOf("team " + t.team) }));
}

function spendRefs(h) {
  return h.spend.filter((t) => t.daily_limit_usd !== null).map((t) => ({
    y: t.daily_limit_usd, label: `${t.team} daily limit`, color: colourOf("team " + t.team),
  }));
}

function cacheSeries(h) {
  return (h.cache_hit_rate || []).map((r) => ({
    name: `${r.model} prefix-cache hits`, values: r.rate, color: colourOf(r.model),
  }));
}

function windowText(minutes) {
  return minutes === 60 ? "the last hour" : `the last ${minutes} minute${minutes === 1 ? "" : "s"}`;
}

function responseCacheText(h) {
  const count = (result) => (h.response_cache || []).filter((r) => r.result === result)
    .reduce((a, r) => a + r.counts.reduce((x, y) => x + y, 0), 0);
  const hits = count("hit"), asked = hits + count("miss");
  return asked ? ` Response cache: ${hits} of ${asked} asked answered from it.` : "";
}

function renderHistory(h) {
  const m = h.minutes, slo = h.slo, span = windowText(m.length);
  const heading = document.querySelector("#history h2");
  if (heading) heading.textContent = `${span[0].toUpperCase()}${span.slice(1)}, per minute (every replica, from Redis)`;
  lineChart(document.getElementById("chart-requests"), m, requestSeries(h),
            { fmt: fmtY.rps, empty: `No requests in ${span}` });
  lineChart(document.getElementById("chart-ttft"), m, quantileSeries(h.ttft),
            { fmt: fmtY.ms, refs: [{ y: slo.ttft_s, label: "TTFT SLO" }],
              empty: `No streamed interactive answers in ${span}` });
  lineChart(document.getElementById("chart-tpot"), m, quantileSeries(h.tpot),
            { fmt: fmtY.ms, refs: [{ y: slo.tpot_s, label: "TPOT SLO" }],
              empty: `No streamed interactive answers in ${span}` });
  lineChart(document.getElementById("chart-load"), m, loadSeries(h),
            { fmt: fmtY.n, empty: `Nothing queued or in flight in ${span}` });
  lineChart(document.getElementById("chart-spend"), m, spendSeries(h),
            { fmt: fmtY.usd, refs: spendRefs(h), empty: `No team spend recorded in ${span}` });
  lineChart(document.getElementById("chart-reasons"), m, [
    { name: "escalation rate", values: h.escalation_rate, color: "#d08a00" },
    { name: "fallback rate", values: h.fallback_rate, color: "#e0533d", dash: "4 3" },
  ], { fmt: fmtY.pct, empty: `No requests in ${span}` });
  const saved = (h.cache_saved_usd || []).reduce((a, s) => a + s.usd.reduce((x, y) => x + y, 0), 0);
  lineChart(document.getElementById("chart-cache"), m, cacheSeries(h),
            { fmt: fmtY.pct, empty: `No prompt tokens in ${span}` });
  const premium = (h.cache_write_premium_usd || []).reduce((x, y) => x + y, 0);
  document.getElementById("cache-saved").textContent =
    `Saved by caches in ${span}: ` + fmtY.usd(saved - premium) +
    (premium > 0 ? " (" + fmtY.usd(saved) + " saved, less " + fmtY.usd(premium) +
                   " that cache writes cost above the input price)." : ".") +
    responseCacheText(h);
  const box = document.getElementById("history");
  box.dataset.generated = String(m[m.length - 1]);
}
