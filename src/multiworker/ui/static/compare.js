// Compare page: pick two or more jobs and a metric; their per-epoch curves on one chart.
"use strict";

(() => {
  const $ = id => document.getElementById(id);
  let ids = (document.body.dataset.ids || "").split(",").filter(Boolean);
  let metric = new URLSearchParams(location.search).get("metric") || "";
  let data = null;

  function keepUrl() {
    const p = new URLSearchParams();
    if (ids.length) p.set("ids", ids.join(","));
    if (metric) p.set("metric", metric);
    history.replaceState(null, "", `/compare${p.toString() ? "?" + p : ""}`);
  }

  function draw() {
    const note = $("compare-note");
    if (!data || ids.length < 2) {
      MW.chart("compare", $("compare-chart"), {});
      note.textContent = "Pick two or more jobs below.";
      $("metric").innerHTML = "";
      return;
    }
    const names = data.metrics;
    if (!names.includes(metric)) metric = names.find(m => m === "loss") || names[0] || "";
    $("metric").innerHTML = names.map(m => `<option ${m === metric ? "selected" : ""}>${MW.esc(m)}</option>`).join("");
    const lines = {};
    for (const job of data.jobs) if (job.metrics[metric]) lines[`${job.name} (${job.id})`] = job.metrics[metric];
    MW.chart("compare", $("compare-chart"), lines, { xLabel: "epoch", yLabel: metric, integerX: true });
    const without = data.jobs.filter(j => !j.metrics[metric]).map(j => j.id);
    note.textContent = without.length ? `no ${metric} recorded for ${without.join(", ")}` : "";
    $("picked").textContent = data.jobs.map(j => `${j.name} (${j.id}, ${j.state})`).join(" vs ");
    keepUrl();
  }

  async function load() {
    if (ids.length < 2) { data = null; draw(); return 5000; }
    try {
      data = await MW.api(`/api/compare?ids=${ids.join(",")}`);
    } catch (err) {
      $("compare-note").textContent = err.message;
      if (err.status === 404) { data = null; return 5000; }
      throw err;
    }
    draw();
    return data.jobs.every(j => MW.TERMINAL.has(j.state)) ? 10000 : 3000;
  }

  const curves = MW.poll(load);

  MW.poll(async () => {
    const doc = await MW.api("/api/jobs");
    $("pick").innerHTML = doc.jobs.map(j => `<tr>
      <td><input type="checkbox" data-id="${MW.esc(j.id)}" ${ids.includes(j.id) ? "checked" : ""}></td>
      <td><a href="/jobs/${MW.esc(j.id)}">${MW.esc(j.name)}</a></td><td class="mono">${MW.esc(j.id)}</td>
      <td>${MW.badge(j.state)}</td><td>${MW.headline(j.headline)}</td></tr>`).join("");
    return 10000;
  });

  $("pick").addEventListener("change", e => {
    const id = e.target.dataset.id;
    if (!id) return;
    ids = e.target.checked ? [...new Set([...ids, id])] : ids.filter(x => x !== id);
    keepUrl();
    curves.now();
  });
  $("metric").addEventListener("change", e => { metric = e.target.value; draw(); });
})();
