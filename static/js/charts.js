// Draws the Plotly charts from the data each page embeds with json_script. Progressive
// enhancement only: every chart has a table with the same numbers, and without JavaScript (or
// Plotly) the page simply shows the tables.
(function () {
  "use strict";

  // Labels come from the database (model and concern names); Plotly renders a few HTML-like
  // tags in text, so angle brackets are replaced to keep names as plain text.
  function plain(value) {
    return String(value).replace(/</g, "\u2039").replace(/>/g, "\u203a");
  }

  function dark() {
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  function layout(title, extra) {
    var fg = dark() ? "#e6edf3" : "#1b1f24";
    return Object.assign({
      title: { text: plain(title), font: { size: 15 } },
      paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)",
      font: { color: fg, family: "system-ui, sans-serif" },
      margin: { l: 10, r: 10, t: 40, b: 10 },
    }, extra || {});
  }

  function heatmap(node, data) {
    var rows = data.y.length;
    var trace = {
      type: "heatmap",
      x: data.x.map(plain),
      y: data.y.map(plain),
      z: data.z,
      text: data.text,
      texttemplate: "%{text}",
      hovertemplate: "%{y}<br>%{x}: %{text}<extra></extra>",
      zmin: 0,
      zmax: 1,
      // Cividis reads the same for most colour-vision deficiencies; the numbers are printed anyway.
      colorscale: "Cividis",
      colorbar: { title: { text: "pass rate" }, tickformat: ".0%" },
      xgap: 2,
      ygap: 2,
    };
    // Wide enough for its labels: on a phone the chart scrolls sideways instead of squashing.
    node.style.minWidth = Math.min(1200, 260 + data.x.length * 90) + "px";
    var extra = { height: Math.max(260, 90 + rows * 48), xaxis: { automargin: true, tickangle: -30 }, yaxis: { automargin: true, autorange: "reversed" } };
    return [[trace], layout(data.title, extra)];
  }

  function history(node, data) {
    var trace = {
      type: "scatter",
      mode: "lines+markers",
      x: data.x,
      y: data.y,
      text: data.labels,
      hovertemplate: "%{text}<extra></extra>",
      error_y: {
        type: "data",
        symmetric: false,
        array: data.high.map(function (h, i) { return h - data.y[i]; }),
        arrayminus: data.low.map(function (l, i) { return data.y[i] - l; }),
      },
      marker: { symbol: "circle", size: 8 },
    };
    var extra = { height: 320, yaxis: { range: [0, 1], tickformat: ".0%", title: { text: "pass rate" } }, xaxis: { automargin: true } };
    return [[trace], layout(data.title, extra)];
  }

  var kinds = { heatmap: heatmap, history: history };

  function draw() {
    if (!window.Plotly) {
      return;
    }
    document.querySelectorAll("[data-chart]").forEach(function (node) {
      var source = document.getElementById(node.getAttribute("data-chart"));
      var kind = kinds[node.getAttribute("data-kind")];
      if (!source || !kind) {
        return;
      }
      var data = JSON.parse(source.textContent);
      var spec = kind(node, data);
      node.classList.add("drawn");
      window.Plotly.newPlot(node, spec[0], spec[1], { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"] });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
