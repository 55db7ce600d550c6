// Jobs page: every job, refreshed in place every 1.5 s; filters kept in the address bar.
"use strict";

(() => {
  const tbody = document.getElementById("jobs");
  const fState = document.getElementById("f-state");
  const fName = document.getElementById("f-name");
  const compareBtn = document.getElementById("compare-btn");
  const selected = new Set();
  let jobs = [];
  let skew = 0;  // server clock minus ours

  const params = new URLSearchParams(location.search);
  fState.value = params.get("state") || "";
  fName.value = params.get("q") || "";

  function matches(job) {
    const state = fState.value;
    if (state === "active" && MW.TERMINAL.has(job.state)) return false;
    if (state && state !== "active" && job.state !== state) return false;
    const q = fName.value.trim().toLowerCase();
    return !q || job.name.toLowerCase().includes(q) || job.id.startsWith(q);
  }

  function row(job) {
    const now = Date.now() / 1000 + skew;
    const duration = job.started_at ? (job.finished_at || now) - job.started_at : null;
    return `
      <td><input type="checkbox" data-id="${MW.esc(job.id)}" ${selected.has(job.id) ? "checked" : ""} aria-label="select for compare"></td>
      <td><a href="/jobs/${MW.esc(job.id)}">${MW.esc(job.name)}</a></td>
      <td class="mono">${MW.esc(job.id)}</td>
      <td class="state">${MW.badge(job.state)}</td>
      <td>${MW.esc(job.backend)}</td>
      <td>${job.running}/${job.replicas}</td>
      <td>${job.restarts}</td>
      <td>${MW.duration(now - job.created_at)}</td>
      <td>${MW.duration(duration)}</td>
      <td>${MW.headline(job.headline)}</td>`;
  }

  function render() {
    const shown = jobs.filter(matches);
    const existing = new Map([...tbody.rows].map(tr => [tr.dataset.id, tr]));
    const frag = document.createDocumentFragment();
    for (const job of shown) {
      let tr = existing.get(job.id);
      if (!tr) { tr = document.createElement("tr"); tr.dataset.id = job.id; }
      const html = row(job);
      if (tr._html !== html) { tr.innerHTML = html; tr._html = html; }
      tr.dataset.state = job.state;
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
    document.getElementById("empty").hidden = jobs.length > 0;
    document.getElementById("count").textContent = `${shown.length} of ${jobs.length} job(s)`;
    for (const id of [...selected]) if (!jobs.some(j => j.id === id)) selected.delete(id);
    compareBtn.disabled = selected.size < 2;
  }

  function keepFilters() {
    const p = new URLSearchParams();
    if (fState.value) p.set("state", fState.value);
    if (fName.value.trim()) p.set("q", fName.value.trim());
    history.replaceState(null, "", p.toString() ? `?${p}` : location.pathname);
    render();
  }

  fState.addEventListener("change", keepFilters);
  fName.addEventListener("input", keepFilters);
  tbody.addEventListener("change", e => {
    if (!e.target.dataset.id) return;
    if (e.target.checked) selected.add(e.target.dataset.id); else selected.delete(e.target.dataset.id);
    compareBtn.disabled = selected.size < 2;
  });
  compareBtn.addEventListener("click", () => { location.href = `/compare?ids=${[...selected].join(",")}`; });

  MW.poll(async () => {
    const doc = await MW.api("/api/jobs");
    jobs = doc.jobs;
    skew = doc.now - Date.now() / 1000;
    render();
    return document.hidden ? 5000 : 1500;
  });
})();
