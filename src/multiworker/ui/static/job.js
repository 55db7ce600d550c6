// Job page: status, replicas, curves and timeline polled while the job runs; one replica's log
// streamed over server-sent events (across restarts); cancel, delete and TensorBoard actions.
"use strict";

(() => {
  const JOB = document.body.dataset.job;
  const $ = id => document.getElementById(id);
  const MAX_LINES = 20000;
  let detail = null;
  let gone = false;
  let statusPoll = null, seriesPoll = null;

  // ---- status, replicas, timeline --------------------------------------------------------
  function markGone() {
    if (gone) return;
    gone = true;
    $("gone").hidden = false;
    for (const id of ["cancel-btn", "delete-btn", "tb-btn"]) $(id).disabled = true;
    $("files-link").classList.add("disabled");
    closeLog("the job was deleted");
    if (seriesPoll) seriesPoll.stop();
  }

  function summary(st) {
    const items = [
      ["Backend", MW.esc(st.backend)], ["Created", MW.when(st.created_at)], ["Started", MW.when(st.started_at)],
      ["Duration", MW.duration(st.started_at ? st.duration_seconds : null)], ["Attempt", st.attempt],
      ["Restarts", st.restarts], ["Epoch", st.epoch ? `${st.epoch}/${st.epochs ?? "?"}` : "-"],
      ["Last metrics", MW.esc(fmtMetrics(st.last_metric_values))],
      ["Final metrics", MW.esc(fmtMetrics(detail.final_headline))],
      ["Output dir", `<span class="mono">${MW.esc(st.output_dir)}</span>`],
    ];
    if (st.message && !detail.failure) items.push(["Message", MW.esc(st.message)]);
    if (st.heartbeat_age_seconds > 10) items.push(["Heartbeat", `<span class="warn">${MW.duration(st.heartbeat_age_seconds)} ago</span>`]);
    $("summary").innerHTML = items.map(([k, v]) => `<div><dt>${k}</dt><dd>${v}</dd></div>`).join("");
  }

  // m holds metric values only (the server leaves bookkeeping out: metrics_line.metric_values).
  function fmtMetrics(m) {
    if (!m) return "-";
    return Object.entries(m).filter(([, v]) => typeof v === "number")
      .map(([k, v]) => k === "images_per_sec" ? `${MW.num(v)} images/s` : `${k} ${MW.num(v)}`).join(" · ") || "-";
  }

  function progress(p) {
    if (!p) return "-";
    const frac = p.steps ? p.step / p.steps : null;
    const bar = frac === null ? "" : `<span class="bar"><span style="width:${Math.round(frac * 100)}%"></span></span>`;
    const rate = p.steps_per_sec ? ` ${MW.num(p.steps_per_sec)} steps/s` : "";
    return `epoch ${p.epoch ?? "?"}/${p.epochs ?? "?"} ${bar} step ${p.step ?? "?"}/${p.steps ?? "?"}${rate}`;
  }

  function replicas(list) {
    $("replicas").innerHTML = list.map(r => `
      <tr data-replica="${MW.esc(r.name)}">
        <td><a href="#log" data-log="${MW.esc(r.name)}">${MW.esc(r.name)}</a></td>
        <td>${MW.esc(r.role)}</td><td>${r.index}</td><td>${MW.esc(r.host || "-")}</td>
        <td>${MW.badge(r.state)}</td><td>${r.exit_code ?? "-"}</td><td>${r.attempt}</td>
        <td>${r.cpu_percent === null ? "-" : MW.num(r.cpu_percent) + "%"}</td>
        <td>${MW.bytes(r.rss_bytes)}</td><td>${progress(r.progress)}</td>
      </tr>`).join("");
  }

  function timeline(doc) {
    const t0 = doc.status.created_at;
    const now = doc.now;
    const spans = doc.attempts.map(a => ({ n: a.n, start: a.started_at, end: a.finished_at || now, outcome: a.outcome || "running" }));
    const total = spans.reduce((s, a) => s + Math.max(0.001, a.end - a.start), 0);
    $("attempts").innerHTML = spans.map(a => `<span class="attempt outcome-${MW.esc(a.outcome)}"
      style="flex-grow:${Math.max(0.001, a.end - a.start) / (total || 1)}"
      title="attempt ${a.n}: ${MW.esc(a.outcome)}, ${MW.duration(a.end - a.start)}">attempt ${a.n} · ${MW.esc(a.outcome)}</span>`).join("");
    $("events").innerHTML = doc.events.map(e => `
      <tr class="${e.type === "Warning" ? "warn" : ""}"><td>${MW.clock(e.ts)}</td><td>+${MW.duration(e.ts - t0)}</td>
      <td>${MW.esc(e.type)}</td><td>${MW.esc(e.reason)}</td><td>${MW.esc(e.replica || "")}</td>
      <td class="msg">${MW.esc(e.message)}</td></tr>`).join("");
  }

  function failure(f) {
    $("failure").hidden = !f;
    if (!f) return;
    $("failure-msg").innerHTML = MW.esc(f.message) + (f.root_cause
      ? ` <a href="#log" data-log="${MW.esc(f.root_cause)}">show ${MW.esc(f.root_cause)}'s log</a>` : "");
    $("failure-tb").textContent = f.traceback.join("\n");
    $("failure-tb").hidden = !f.traceback.length;
    $("failure-more").textContent = f.details.join("\n");
  }

  function render(doc) {
    const st = doc.status;
    $("job-state").outerHTML = `<span id="job-state" class="badge state-${MW.esc(st.state)}">${MW.esc(st.state)}</span>`;
    document.title = `${st.name} (${st.id}): ${st.state} · multiworker`;
    summary(st);
    replicas(doc.replicas);
    timeline(doc);
    failure(doc.failure);
    $("spec").textContent = doc.spec_yaml;
    $("cancel-btn").hidden = MW.TERMINAL.has(st.state);
    $("files-link").classList.toggle("disabled", !doc.output_exists);
    if (doc.tensorboard.url) tbLink(doc.tensorboard);
    logChoices(doc);
  }

  statusPoll = MW.poll(async () => {
    try {
      detail = await MW.api(`/api/jobs/${JOB}`);
    } catch (err) {
      if (err.status === 404) { markGone(); return null; }
      throw err;
    }
    render(detail);
    return MW.TERMINAL.has(detail.status.state) ? 3000 : 1500;
  });

  // ---- curves ----------------------------------------------------------------------------
  function epochLines(metrics, keep) {
    const lines = {};
    const names = Object.keys(metrics).filter(keep);
    const several = names.some(m => Object.keys(metrics[m]).length > 1);
    for (const m of names) for (const [rep, pts] of Object.entries(metrics[m])) lines[several ? `${m} (${rep})` : m] = pts;
    return lines;
  }

  seriesPoll = MW.poll(async () => {
    const width = $("chart-cpu").clientWidth || 600;
    let s;
    try {
      s = await MW.api(`/api/jobs/${JOB}/series?points=${Math.min(4000, Math.max(200, Math.round(width)))}`);
    } catch (err) {
      if (err.status === 404) { markGone(); return null; }
      throw err;
    }
    MW.chart("loss", $("chart-loss"), epochLines(s.epoch_metrics, m => m.includes("loss")), { xLabel: "epoch", integerX: true });
    MW.chart("metrics", $("chart-metrics"), epochLines(s.epoch_metrics, m => !m.includes("loss")), { xLabel: "epoch", integerX: true });
    MW.chart("cpu", $("chart-cpu"), s.cpu_percent, { xLabel: "seconds since start", yLabel: "CPU %", markers: s.restarts_at });
    MW.chart("memory", $("chart-memory"), s.memory_mib, { xLabel: "seconds since start", yLabel: "MiB", markers: s.restarts_at });
    $("series-note").textContent = s.samples_total ? `${s.samples_total.toLocaleString()} resource samples` : "";
    const done = MW.TERMINAL.has(s.state);
    return done ? null : (document.hidden ? 10000 : 3000);
  });

  // ---- logs ------------------------------------------------------------------------------
  const pane = $("log"), search = $("log-search");
  let source = null, lines = [], lastId = null, choice = { replica: null, attempt: "" };

  function logChoices(doc) {
    const sel = $("log-replica");
    const names = [...(doc.replicas.length ? doc.replicas.map(r => r.name) : [doc.primary]), "supervisor"];
    if (sel.options.length !== names.length) {
      sel.innerHTML = names.map(n => `<option>${MW.esc(n)}</option>`).join("");
      if (!choice.replica) choice.replica = doc.primary;
      sel.value = choice.replica;
      if (!source && !gone) openLog();
    }
    const att = $("log-attempt");
    const latest = doc.status.attempt;
    if (att.options.length !== latest + 2) {
      const keep = att.value;
      att.innerHTML = '<option value="">latest (follow)</option>' +
        Array.from({ length: latest + 1 }, (_, i) => `<option value="${i}">${i}</option>`).join("");
      att.value = keep;
    }
  }

  function logUrl(extra = "") {
    const p = new URLSearchParams({ replica: choice.replica });
    if (choice.attempt !== "") p.set("attempt", choice.attempt);
    return `/api/jobs/${JOB}/logs${extra}?${p}`;
  }

  function closeLog(why) {
    if (source) { source.close(); source = null; }
    if (why) $("log-state").textContent = why;
  }

  function lineNode(text) {
    const div = document.createElement("div");
    const q = search.value.trim().toLowerCase();
    if (!q) { div.textContent = text; return div; }
    const i = text.toLowerCase().indexOf(q);
    if (i < 0) return null;
    div.append(text.slice(0, i));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(i, i + q.length);
    div.append(mark, text.slice(i + q.length));
    return div;
  }

  function append(texts, cls) {
    const atBottom = pane.scrollHeight - pane.scrollTop - pane.clientHeight < 40;
    const frag = document.createDocumentFragment();
    for (const t of texts) {
      lines.push({ t, cls });
      const node = lineNode(t);
      if (node) { if (cls) node.className = cls; frag.appendChild(node); }
    }
    pane.appendChild(frag);
    if (lines.length > MAX_LINES) {
      lines.splice(0, lines.length - MAX_LINES);
      redraw();
    }
    updateCount();
    if (atBottom) pane.scrollTop = pane.scrollHeight;
  }

  function redraw() {
    const frag = document.createDocumentFragment();
    for (const { t, cls } of lines) {
      const node = lineNode(t);
      if (node) { if (cls) node.className = cls; frag.appendChild(node); }
    }
    pane.replaceChildren(frag);
    updateCount();
  }

  function updateCount() {
    const q = search.value.trim();
    $("log-count").textContent = q ? `${pane.childElementCount} of ${lines.length} lines match` : `${lines.length} lines`;
  }

  function openLog(resume) {
    closeLog();
    if (!resume) { lines = []; pane.replaceChildren(); lastId = null; }
    $("log-raw").href = logUrl("/raw");
    const url = logUrl("/stream") + (resume ? `&from=${encodeURIComponent(resume)}` : "");
    const es = new EventSource(url);
    source = es;
    $("log-state").textContent = "following";
    es.addEventListener("attempt", e => {
      const d = JSON.parse(e.data);
      if (d.restart) append([`--- attempt ${d.attempt}: the group restarted ---`], "marker");
      $("log-raw").href = `/api/jobs/${JOB}/logs/raw?replica=${encodeURIComponent(choice.replica)}&attempt=${d.attempt}`;
    });
    es.addEventListener("lines", e => { lastId = e.lastEventId || lastId; append(JSON.parse(e.data).lines); });
    es.addEventListener("end", e => {
      const d = JSON.parse(e.data);
      closeLog(`ended (${d.state}, attempt ${d.attempt})`);
    });
    es.addEventListener("gone", () => { closeLog(); markGone(); });
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED && source === es) closeLog("disconnected");
      else if (source === es) $("log-state").textContent = "reconnecting…";
    };
    es.onopen = () => { if (source === es) $("log-state").textContent = "following"; };
  }

  $("log-replica").addEventListener("change", e => { choice.replica = e.target.value; openLog(); });
  $("log-attempt").addEventListener("change", e => { choice.attempt = e.target.value; openLog(); });
  search.addEventListener("input", redraw);
  document.addEventListener("click", e => {
    const name = e.target.dataset && e.target.dataset.log;
    if (!name) return;
    choice.replica = name;
    $("log-replica").value = name;
    openLog();
  });
  // A hidden tab gives its connection back (browsers allow few per server); it resumes where it was.
  document.addEventListener("visibilitychange", () => {
    if (document.hidden && source) { closeLog("paused while hidden"); source = null; pane.dataset.paused = "1"; }
    else if (!document.hidden && pane.dataset.paused && !gone) { delete pane.dataset.paused; openLog(lastId); }
  });

  // ---- actions ---------------------------------------------------------------------------
  function confirmDialog(text) {
    return new Promise(resolve => {
      const dlg = $("confirm");
      $("confirm-text").textContent = text;
      dlg.onclose = () => resolve(dlg.returnValue === "ok");
      dlg.showModal();
    });
  }

  function message(text, error) {
    const el = $("action-msg");
    el.hidden = false;
    el.className = `banner ${error ? "error" : "ok"}`;
    el.textContent = text;
  }

  $("cancel-btn").addEventListener("click", async () => {
    if (!await confirmDialog(`Cancel job ${JOB}? Every replica is stopped (grace period, then SIGKILL).`)) return;
    $("cancel-btn").disabled = true;
    message("cancelling…");
    try {
      const r = await MW.api(`/api/jobs/${JOB}/cancel`, { method: "POST" });
      message(`job ${JOB} is ${r.state}`);
    } catch (err) { message(`cancel failed: ${err.message}`, true); }
    $("cancel-btn").disabled = false;
    statusPoll.now();
  });

  $("delete-btn").addEventListener("click", async () => {
    const running = detail && !MW.TERMINAL.has(detail.status.state);
    const text = `Delete job ${JOB}, its records and logs?` + (running ? " It is still running: it is cancelled first." : "");
    if (!await confirmDialog(text)) return;
    message("deleting…");
    try {
      await MW.api(`/api/jobs/${JOB}/delete${running ? "?force=1" : ""}`, { method: "POST" });
      location.href = "/";
    } catch (err) { message(`delete failed: ${err.message}`, true); }
  });

  function tbLink(tb) {
    $("tb-link").innerHTML = tb.state === "running"
      ? `<a href="${MW.esc(tb.url)}" target="_blank" rel="noopener">open TensorBoard ↗</a>`
      : `<span class="muted">TensorBoard starting at ${MW.esc(tb.url)}…</span>`;
  }

  $("tb-btn").addEventListener("click", async () => {
    $("tb-btn").disabled = true;
    $("tb-link").innerHTML = '<span class="muted">starting TensorBoard…</span>';
    try { tbLink(await MW.api(`/api/jobs/${JOB}/tensorboard`, { method: "POST" })); }
    catch (err) { $("tb-link").innerHTML = `<span class="error-text">${MW.esc(err.message)}</span>`; }
    $("tb-btn").disabled = gone;
  });
})();
