// Line charts as plain SVG, for the operator page's last hour (no library, no build step).
//
//   lineChart(box, minutes, series, {fmt, refs: [{y, label}], empty})
//
// box: the element to fill; minutes: the minutes' epoch seconds, oldest first;
// series: [{name, values: [number or null per minute], color, dash}]; a null
// leaves a gap. refs are dashed horizontal lines (an SLO, a budget). Each drawn
// series is a <path data-series="name">, and its legend entry carries the same
// name (the UI test compares them with /admin/history).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 440, H = 170, LEFT = 56, RIGHT = 8, TOP = 8, BOTTOM = 22;
const PALETTE = ["#4c7cf0", "#e0533d", "#2a8a3e", "#d08a00", "#8e44ad", "#16a085",
                 "#7f8c8d", "#c0392b", "#2c3e50", "#f39c12"];

function svgEl(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function clock(epochS) {
  return new Date(epochS * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function isNumber(v) {
  return typeof v === "number" && isFinite(v);
}

function pathOf(values, x, y) {
  let d = "", pen = false;
  values.forEach((v, i) => {
    if (!isNumber(v)) { pen = false; return; }
    d += (pen ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
    pen = true;
  });
  return d;
}

function axes(svg, minutes, top, fmt, x, y) {
  for (const frac of [0, 0.5, 1]) {
    const v = top * frac, yy = y(v);
    svg.append(svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: yy, y2: yy, stroke: "#e4e6eb" }),
               svgEl("text", { x: LEFT - 4, y: yy + 4, "text-anchor": "end", class: "tick" }, fmt(v)));
  }
  const n = minutes.length;
  for (let i = 0; i < n; i += 15) {
    const at = n - 1 - i;    // every 15 minutes back from now
    svg.append(svgEl("text", { x: x(at), y: H - 6, "text-anchor": "middle", class: "tick" },
                     clock(minutes[at])));
  }
}

function legendEntry(name, color, dash) {
  const item = document.createElement("span");
  item.className = "key";
  item.dataset.series = name;
  const swatch = svgEl("svg", { width: 18, height: 8 });
  swatch.append(svgEl("line", { x1: 0, x2: 18, y1: 4, y2: 4, stroke: color, "stroke-width": 2,
                                "stroke-dasharray": dash || "" }));
  item.append(swatch, document.createTextNode(" " + name));
  return item;
}

function lineChart(box, minutes, series, opts) {
  const fmt = opts.fmt, refs = opts.refs || [];
  const drawn = series.filter((s) => s.values.some((v) => v !== null && v !== undefined));
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart" });
  const legend = document.createElement("div");
  legend.className = "legend";
  box.replaceChildren(svg, legend);
  if (!drawn.length) {
    svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "none" },
                     opts.empty || "Nothing in the last hour"));
    return;
  }
  let top = 0;
  for (const s of drawn) for (const v of s.values) if (v !== null && v > top) top = v;
  for (const r of refs) top = Math.max(top, r.y);
  top = top > 0 ? top * 1.1 : 1;
  const span = Math.max(1, minutes.length - 1);
  const x = (i) => LEFT + (W - LEFT - RIGHT) * i / span;
  const y = (v) => TOP + (H - TOP - BOTTOM) * (1 - v / top);
  axes(svg, minutes, top, fmt, x, y);
  for (const r of refs) {
    svg.append(svgEl("line", { x1: LEFT, x2: W - RIGHT, y1: y(r.y), y2: y(r.y), class: "ref",
                               stroke: r.color || "#e0533d", "stroke-dasharray": "5 3" }),
               svgEl("text", { x: W - RIGHT - 2, y: y(r.y) - 3, "text-anchor": "end",
                               class: "tick", fill: r.color || "#e0533d" }, r.label));
  }
  for (const s of drawn) {
    svg.append(svgEl("path", { d: pathOf(s.values, x, y), fill: "none", stroke: s.color,
                               "stroke-width": 1.6, "stroke-dasharray": s.dash || "",
                               "data-series": s.name }));
    s.values.forEach((v, i) => {      // a minute with no neighbour draws no line: a dot
      if (isNumber(v) && !isNumber(s.values[i - 1]) && !isNumber(s.values[i + 1])) {
        svg.append(svgEl("circle", { cx: x(i), cy: y(v), r: 2, fill: s.color }));
      }
    });
    legend.append(legendEntry(s.name, s.color, s.dash));
  }
}

// A stable colour per name (a model, a team) across charts and refreshes.
const colours = new Map();
function colourOf(name) {
  if (!colours.has(name)) colours.set(name, PALETTE[colours.size % PALETTE.length]);
  return colours.get(name);
}
