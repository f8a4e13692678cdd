// jaxwebrl trajectory viewer. Every piece of page or model text is put in the DOM with textContent (never
// innerHTML), images only from data:image URIs, so a hostile page or model output cannot run script here.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("viewer-data").textContent);
  const episodes = DATA.episodes;
  const $ = (id) => document.getElementById(id);
  let current = -1, currentStep = -1;
  const FILTERS = {
    task: (e) => e.task,
    policy: (e) => e.policy,
    success: (e) => (e.success ? "solved" : "failed"),
    termination: (e) => e.termination,
    iteration: (e) => (e.iteration === null ? "eval" : String(e.iteration)),
  };

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function num(x, digits) {
    return x === null || x === undefined ? "-" : Number(x).toFixed(digits);
  }

  function safeImage(uri) {
    return typeof uri === "string" && /^data:image\/(jpeg|png);base64,[A-Za-z0-9+/=]+$/.test(uri);
  }

  // ---- filters -------------------------------------------------------------------------------------
  function buildFilters() {
    for (const [name, get] of Object.entries(FILTERS)) {
      const select = $("f-" + name);
      const values = Array.from(new Set(episodes.map(get)));
      values.sort((a, b) => (name === "iteration" && a !== "eval" && b !== "eval" ? Number(a) - Number(b)
        : String(a).localeCompare(String(b))));
      const all = el("option", null, "all");
      all.value = "";
      select.appendChild(all);
      for (const v of values) {
        const opt = el("option", null, name === "iteration" && v === "eval" ? "evaluation" : v);
        opt.value = v;
        select.appendChild(opt);
      }
      select.addEventListener("change", applyFilters);
    }
  }

  function applyFilters() {
    const wanted = {};
    for (const name of Object.keys(FILTERS)) wanted[name] = $("f-" + name).value;
    let shown = 0;
    for (const row of document.querySelectorAll("#episodes .episode")) {
      const e = episodes[Number(row.dataset.index)];
      const ok = Object.entries(FILTERS).every(([name, get]) => wanted[name] === "" || get(e) === wanted[name]);
      row.hidden = !ok;
      if (ok) shown += 1;
    }
    $("count").textContent = String(shown);
  }

  // ---- episode list --------------------------------------------------------------------------------
  function buildList() {
    const body = $("episodes");
    episodes.forEach((e, i) => {
      const row = el("tr", "episode " + (e.success ? "ok" : "fail"));
      row.dataset.index = String(i);
      row.tabIndex = 0;
      row.appendChild(el("td", null, e.policy));
      row.appendChild(el("td", null, e.iteration === null ? "eval" : e.iteration));
      row.appendChild(el("td", null, e.task));
      row.appendChild(el("td", null, e.seed));
      row.appendChild(el("td", "mark", e.success ? "\u2713" : "\u2717"));
      row.appendChild(el("td", null, num(e.reward, 2)));
      row.appendChild(el("td", null, e.termination));
      row.appendChild(el("td", null, e.steps.length));
      row.addEventListener("click", () => showEpisode(i));
      row.addEventListener("keydown", (ev) => { if (ev.key === "Enter") showEpisode(i); });
      body.appendChild(row);
    });
    $("count").textContent = String(episodes.length);
  }

  // ---- one episode ---------------------------------------------------------------------------------
  function field(label, value, id, pre) {
    const box = el("div", "field");
    box.appendChild(el("div", "label", label));
    const v = el(pre ? "pre" : "div", "value", value);
    if (id) v.id = id;
    box.appendChild(v);
    return box;
  }

  function showEpisode(i) {
    const e = episodes[i];
    current = i;
    currentStep = -1;
    for (const row of document.querySelectorAll("#episodes .episode.selected")) row.classList.remove("selected");
    document.querySelector('#episodes .episode[data-index="' + i + '"]').classList.add("selected");
    const head = $("episode-head");
    head.replaceChildren();
    head.appendChild(el("h2", null, e.task + " (seed " + e.seed + ")"));
    const facts = [
      "policy " + e.policy, e.iteration === null ? "evaluation" : "iteration " + e.iteration,
      e.success ? "solved" : "failed", "reward " + num(e.reward, 3), "termination " + e.termination,
      e.steps.length + " steps", "policy version " + e.policy_version,
    ];
    if (e.advantage !== null && e.advantage !== undefined) facts.push("advantage " + num(e.advantage, 3));
    head.appendChild(el("div", "facts", facts.join(" \u00b7 ")));
    head.appendChild(field("goal", e.goal, "episode-goal", true));
    if (e.error) head.appendChild(field("error", e.error, "episode-error", true));
    const list = $("steps");
    list.replaceChildren();
    e.steps.forEach((s, j) => {
      const b = el("button", "step" + (s.format_ok ? "" : " bad"), "step " + (j + 1) + ": " + (s.parsed_action || "(no action parsed)"));
      b.dataset.index = String(j);
      b.addEventListener("click", () => showStep(e, j));
      list.appendChild(b);
    });
    if (e.steps.length === 0) list.appendChild(el("div", "empty", "No step was played" + (e.error ? " (see the error above)." : ".")));
    $("step-detail").replaceChildren();
    if (e.steps.length) showStep(e, 0);
  }

  function showStep(e, j) {
    const s = e.steps[j];
    currentStep = j;
    for (const b of document.querySelectorAll("#steps .step")) b.classList.toggle("selected", Number(b.dataset.index) === j);
    const box = $("step-detail");
    box.replaceChildren();
    const nums = el("div", "facts");
    nums.id = "step-numbers";
    nums.textContent = [
      "step " + (j + 1) + " of " + e.steps.length,
      "prompt tokens " + s.prompt_tokens,
      "response tokens " + s.response_tokens + " (" + s.trained_tokens + " trained)",
      "logprob sum " + num(s.logprob_sum, 3) + ", mean " + num(s.logprob_mean, 3),
      "reward " + num(s.reward, 3) + (j === e.steps.length - 1 ? " (episode reward)" : ""),
      s.format_ok ? "format ok" : "format error",
    ].concat(s.env_termination ? ["the environment ended the episode: " + s.env_termination] : []).join(" \u00b7 ");
    box.appendChild(nums);
    box.appendChild(field("model output", s.output, "step-output", true));
    box.appendChild(field("parsed action", s.parsed_action || "(none)", "step-action", true));
    const hit = s.element ? ("[" + s.element.id + "] " + (s.element.missing ? "(not on the page)"
      : (s.element.role || s.element.tag || "") + " " + JSON.stringify(s.element.name || ""))) : "(none)";
    box.appendChild(field("element hit", hit, "step-element", false));
    box.appendChild(field("feedback", s.feedback || "(none)", "step-feedback", true));
    if (safeImage(s.screenshot)) {
      const fig = el("div", "field");
      fig.appendChild(el("div", "label", "screenshot before the action (the element hit outlined in red)"));
      const frame = el("div", "shotbox");
      const img = el("img", "shot");
      img.id = "step-screenshot";
      img.alt = "screenshot of step " + (j + 1);
      img.src = s.screenshot;
      frame.appendChild(img);
      const bbox = s.element && s.element.bbox, size = s.screenshot_size;
      if (Array.isArray(bbox) && Array.isArray(size) && size[0] > 0 && size[1] > 0) {
        const mark = el("div", "marker");
        mark.id = "step-marker";
        mark.style.left = (100 * bbox[0] / size[0]) + "%";
        mark.style.top = (100 * bbox[1] / size[1]) + "%";
        mark.style.width = (100 * bbox[2] / size[0]) + "%";
        mark.style.height = (100 * bbox[3] / size[1]) + "%";
        frame.appendChild(mark);
      }
      fig.appendChild(frame);
      box.appendChild(fig);
    }
    box.appendChild(field("observation (as the prompt showed it)", s.observation, "step-observation", true));
    if (s.prompt) {
      const d = el("details", "field");
      d.appendChild(el("summary", "label", "whole prompt (decoded)"));
      const pre = el("pre", "value", s.prompt);
      pre.id = "step-prompt";
      d.appendChild(pre);
      box.appendChild(d);
    }
  }

  // ---- keys: up/down = previous/next shown episode, left/right = previous/next step ---------------
  document.addEventListener("keydown", (ev) => {
    if (ev.target instanceof HTMLSelectElement || ev.altKey || ev.ctrlKey || ev.metaKey) return;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      const rows = Array.from(document.querySelectorAll("#episodes .episode")).filter((r) => !r.hidden);
      if (!rows.length) return;
      const at = rows.findIndex((r) => Number(r.dataset.index) === current);
      const next = ev.key === "ArrowDown" ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
      showEpisode(Number(rows[next].dataset.index));
      rows[next].scrollIntoView({ block: "nearest" });
      ev.preventDefault();
    } else if ((ev.key === "ArrowRight" || ev.key === "ArrowLeft") && current >= 0) {
      const e = episodes[current];
      const j = currentStep + (ev.key === "ArrowRight" ? 1 : -1);
      if (j >= 0 && j < e.steps.length) showStep(e, j);
      ev.preventDefault();
    }
  });

  // ---- start ---------------------------------------------------------------------------------------
  document.title = DATA.title;
  $("title").textContent = DATA.title;
  $("total").textContent = String(episodes.length);
  if (DATA.left_out > 0) $("note").textContent = DATA.left_out + " more episodes were left out by the viewer's cap (" + DATA.max_episodes + ").";
  if (DATA.screenshots_left_out > 0) $("note").textContent += " " + DATA.screenshots_left_out + " screenshots were left out by the cap.";
  buildList();
  buildFilters();
  applyFilters();
  if (episodes.length === 0) $("steps").appendChild(el("div", "empty", "This run has no episodes to show."));
  document.body.dataset.ready = "1";
})();
