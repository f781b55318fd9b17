// rocketspark dashboard: live figures (the page's #live region fetched again), charts (plotly.js),
// body views and confirmations. No inline script: the pages' Content-Security-Policy forbids it.
"use strict";

const refreshMs = Number(document.body.dataset.refreshMs) || 5000;

function liveUrl() {
  const url = new URL(window.location.href);
  url.searchParams.set("fragment", "live");
  url.searchParams.delete("done");
  url.searchParams.delete("sig");
  return url;
}

async function refreshLive() {
  const live = document.getElementById("live");
  if (!live) return;
  try {
    const response = await fetch(liveUrl(), { credentials: "same-origin", cache: "no-store" });
    if (response.ok) {
      live.innerHTML = await response.text();
      live.dataset.refreshed = String(Number(live.dataset.refreshed || 0) + 1);
    }
  } catch (e) {
    // the dashboard is away for a moment: keep the figures shown
  }
}

async function drawChart(element) {
  try {
    const response = await fetch(element.dataset.series, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) return;
    const lines = await response.json();
    const traces = lines.map((line) => ({
      name: line.name,
      x: line.x.map((t) => new Date(t)),
      y: line.y,
      type: "scatter",
      mode: "lines+markers",
      marker: { size: 5 },
    }));
    const layout = {
      margin: { l: 50, r: 10, t: 10, b: 40 },
      yaxis: { title: { text: element.dataset.ytitle || "" }, rangemode: "tozero" },
      showlegend: true,
      legend: { orientation: "h" },
    };
    window.Plotly.react(element, traces, layout, { displaylogo: false, responsive: true });
    element.dataset.points = String(traces.reduce((n, trace) => n + trace.y.length, 0));
  } catch (e) {
    // keep the chart drawn last
  }
}

function drawCharts() {
  document.querySelectorAll(".chart[data-series]").forEach(drawChart);
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button.view");
  if (!button) return;
  const article = button.closest("article");
  article.querySelectorAll("pre.body").forEach((pre) => {
    pre.hidden = !pre.classList.contains("body-" + button.dataset.view);
  });
  article.querySelectorAll("button.view").forEach((b) => b.classList.toggle("on", b === button));
});

document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

drawCharts();
if (document.getElementById("live")) setInterval(refreshLive, refreshMs);
if (document.querySelector(".chart[data-series]")) setInterval(drawCharts, refreshMs);
