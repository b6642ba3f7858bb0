// Draws the dashboard's charts with the vendored uPlot; data is embedded by the server.
(function () {
  "use strict";
  function draw(el) {
    var data = JSON.parse(el.querySelector('script[type="application/json"]').textContent);
    // the API answers milliseconds; uPlot's time scales take seconds
    function seconds(ms) { return ms.map(function (v) { return v / 1000; }); }
    var x = seconds(data.emitted_at_ms);
    var title = document.createElement("div");
    title.className = "chart-title";
    title.textContent = el.dataset.title + (x.length ? "" : " — no watermarks in the last hour");
    el.appendChild(title);
    var width = Math.max(480, Math.min(760, el.parentElement.clientWidth - 40));
    var opts, columns;
    if (el.dataset.kind === "time") {
      opts = {
        width: width, height: 220,
        scales: { x: { time: true }, y: { time: true } },
        series: [{}, { label: "watermark time", stroke: "#1f77b4", width: 2 },
                 { label: "upper time", stroke: "#ff7f0e", width: 1, dash: [4, 4] }],
        axes: [{}, { size: 90 }]
      };
      columns = [x, seconds(data.time_ms), seconds(data.upper_time_ms)];
    } else {
      opts = {
        width: width, height: 180,
        scales: { x: { time: true } },
        series: [{}, { label: "watermark lag (s)", stroke: "#d62728", fill: "rgba(214,39,40,0.08)", width: 2 }]
      };
      columns = [x, seconds(data.watermark_lag_ms)];
    }
    new uPlot(opts, columns, el);
    el.dataset.rendered = "true";
  }
  document.querySelectorAll(".chart").forEach(draw);
})();
