"use strict";
// ViFusion web page: key prompt, search (text / image / clip) in the chosen modalities, results with
// what matched and their words, the library (every video, its state; delete, retry), player with
// the search's moments on a timeline and subtitles, upload + job progress (stage, warnings).
// Every /v1 call sends the key; thumbnails and subtitles are fetched as blobs for that reason. The
// video plays from a signed, short-lived /media URL (a <video> cannot send the key; the key never
// goes into a URL), so the browser fetches only the byte ranges it plays and seeks to.
// Text from the service is only ever put in the page as text (textContent, text nodes), never as HTML.
(() => {
  const $ = (id) => document.getElementById(id);
  // The key lives in sessionStorage (gone when the tab closes) unless the user ticks "Remember"
  // (then localStorage, kept across visits). The CSP keeps other origins' scripts off this page.
  const KEY_STORE = "vifusion.apiKey";
  let key = sessionStorage.getItem(KEY_STORE) || localStorage.getItem(KEY_STORE) || "";
  function keepKey(k, remember) {
    (remember ? localStorage : sessionStorage).setItem(KEY_STORE, k);
    (remember ? sessionStorage : localStorage).removeItem(KEY_STORE);
  }

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function errorOf(status, text) {
    try {
      const e = JSON.parse(text).error;
      if (e && e.message) return new ApiError(status, e.code || "error", e.message);
    } catch (_) { /* not JSON */ }
    return new ApiError(status, "http_" + status, text && text.length < 200 ? text : `HTTP ${status}`);
  }

  // fetch() with the key; throws ApiError for a non-2xx answer (and asks for the key on a 401).
  async function api(path, opts = {}) {
    const headers = new Headers(opts.headers || {});
    headers.set("Authorization", "Bearer " + key);
    let r;
    try { r = await fetch(path, { ...opts, headers }); }
    catch (_) { throw new ApiError(0, "network", "could not reach the service"); }
    if (r.ok) return r;
    const err = await errorOf(r.status, await r.text());
    if (r.status === 401) askKey("The API key was not accepted: " + err.message);
    throw err;
  }

  // -- messages -------------------------------------------------------------------------
  function showError(err) {
    if (err && err.status === 401) return; // the key dialog says it
    const text = err instanceof ApiError ? `${err.message} (${err.code})` : String(err && err.message || err);
    $("error-text").textContent = text;
    $("error").hidden = false;
  }
  function clearError() { $("error").hidden = true; }
  $("error-close").onclick = clearError;

  // -- the key --------------------------------------------------------------------------
  function askKey(message) {
    $("key-error").textContent = message || "";
    $("key-error").hidden = !message;
    $("key-cancel").hidden = !key || !!message;
    $("key-input").value = "";
    $("key-remember").checked = localStorage.getItem(KEY_STORE) !== null;
    $("key-dialog").hidden = false;
    $("key-input").focus();
  }
  $("key-change").onclick = () => askKey("");
  $("key-cancel").onclick = () => { $("key-dialog").hidden = true; };
  $("key-form").onsubmit = async (ev) => {
    ev.preventDefault();
    const given = $("key-input").value.trim();
    if (!given) return;
    $("key-save").disabled = true;
    try {
      // A cheap call with the new key: is it right?
      const r = await fetch("/v1/videos?limit=1", { headers: { Authorization: "Bearer " + given } });
      if (!r.ok) throw await errorOf(r.status, await r.text());
      key = given;
      keepKey(key, $("key-remember").checked);
      $("key-dialog").hidden = true;
      clearError();
      loadCollections().catch(showError);
      loadLanguages().catch(showError);
    } catch (err) {
      $("key-error").textContent = err.status === 401 ? "That key was not accepted: " + err.message
        : "Could not check the key: " + err.message;
      $("key-error").hidden = false;
      $("key-input").select();
    } finally {
      $("key-save").disabled = false;
    }
  };

  // -- search ---------------------------------------------------------------------------
  const fmt = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, "0")}`;
  let queryFile = null; // the dropped image or clip
  let lastQuery = null; // {text} or {file}, for "More results"
  let cursor = null;
  let searchSeq = 0;
  let thumbUrls = [];
  let found = []; // the moments of the current search, every page shown (the player's timeline marks them)

  // What a text search looks in: the ticked modalities (at least one stays ticked). An image or
  // clip is searched by what is seen, so speech and screen text do not apply to it.
  const MODES = ["visual", "speech", "screen"];
  const chosenModes = () => MODES.filter((m) => $("mode-" + m).checked);
  MODES.forEach((m) => {
    $("mode-" + m).onchange = (ev) => {
      if (!chosenModes().length) { ev.target.checked = true; return; } // one must stay on
      if (lastQuery && lastQuery.text !== undefined) search({ text: lastQuery.text, modalities: chosenModes() });
    };
  });
  function visualOnly(on) {
    ["speech", "screen"].forEach((m) => { $("mode-" + m).disabled = on; });
    $("modes").title = on ? "An image or a clip is searched by what is seen" : "";
  }

  function setQueryFile(file) {
    queryFile = file;
    visualOnly(!!file);
    const preview = $("query-preview");
    if (preview.src) URL.revokeObjectURL(preview.src), preview.removeAttribute("src");
    $("query-chip").hidden = !file;
    $("drop-text").hidden = !!file;
    if (!file) { $("query-file").value = ""; return; }
    $("query-name").textContent = (file.type.startsWith("video/") ? "Clip: " : "Image: ") + file.name;
    preview.hidden = !file.type.startsWith("image/");
    if (!preview.hidden) { preview.onerror = () => { preview.hidden = true; }; preview.src = URL.createObjectURL(file); }
  }

  // The collection and language pickers, filled from a listing of what the key reaches
  // (GET /v1/collections, GET /v1/languages), each keeping its choice while still listed;
  // "" is every one.
  async function fillPicker(id, path, field, all, valueOf) {
    const picker = $(id);
    const chosen = picker.value;
    const listed = (await (await api(path)).json())[field];
    picker.replaceChildren(el("option", "", all));
    picker.firstChild.value = "";
    listed.forEach((x) => {
      const option = el("option", "", `${valueOf(x)} (${x.videos} video${x.videos === 1 ? "" : "s"})`);
      option.value = valueOf(x);
      picker.append(option);
    });
    picker.value = listed.some((x) => valueOf(x) === chosen) ? chosen : "";
  }
  function loadCollections() {
    return fillPicker("collection", "/v1/collections", "collections", "All collections", (c) => c.name);
  }
  function loadLanguages() {
    return fillPicker("language", "/v1/languages", "languages", "All languages", (l) => l.code);
  }
  $("collection").onfocus = () => loadCollections().catch(showError);
  $("collection").onchange = () => lastQuery && search(lastQuery);

  $("language").onfocus = () => loadLanguages().catch(showError);
  $("language").onchange = () => lastQuery && search(lastQuery);

  function searchBody(q, more) {
    const topK = $("top-k").value;
    const collection = $("collection").value;
    const language = $("language").value;
    if (q.text !== undefined) {
      const body = { text: q.text, top_k: Number(topK), modalities: q.modalities };
      if (collection) body.collections = [collection];
      if (language) body.languages = [language];
      if (more) body.cursor = more;
      return { body: JSON.stringify(body), headers: { "Content-Type": "application/json" } };
    }
    const form = new FormData();
    form.append(q.file.type.startsWith("video/") ? "clip" : "image", q.file);
    form.append("top_k", topK);
    if (collection) form.append("collections", collection);
    if (language) form.append("languages", language);
    if (more) form.append("cursor", more);
    return { body: form };
  }

  async function search(q, more = null) {
    const seq = ++searchSeq;
    clearError();
    const results = $("results");
    if (!more) {
      thumbUrls.forEach((u) => URL.revokeObjectURL(u));
      thumbUrls = [];
      found = [];
      results.replaceChildren(el("div", "empty loading", [el("span", "spinner"), " Searching…"]));
      $("results-head").textContent = "";
      $("more-button").hidden = true;
    }
    $("search-button").disabled = $("more-button").disabled = true;
    try {
      const r = await api("/v1/search", { method: "POST", ...searchBody(q, more) });
      const page = await r.json();
      if (seq !== searchSeq) return;
      lastQuery = q;
      cursor = page.next_cursor;
      if (!more) results.replaceChildren();
      found.push(...page.results);
      page.results.forEach((m) => results.append(card(m)));
      const n = results.querySelectorAll(".result").length;
      const what = q.text !== undefined ? `“${q.text}”` : q.file.name;
      const partial = page.partial ? ` · partial: shard ${page.missing_shards.join(", ")} did not answer` : "";
      $("results-head").textContent = n ? `${n} result${n > 1 ? "s" : ""} for ${what} · ${page.took_ms} ms${partial}` : "";
      if (!n) results.replaceChildren(el("div", "empty", `No results for ${what}. Try other words, or add videos.`));
      $("more-button").hidden = !cursor;
    } catch (err) {
      if (seq !== searchSeq) return;
      if (!more) results.replaceChildren(el("div", "empty", "Search failed."));
      showError(err);
    } finally {
      if (seq === searchSeq) $("search-button").disabled = $("more-button").disabled = false;
    }
  }

  function el(tag, cls, children = []) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    (Array.isArray(children) ? children : [children]).forEach((c) => e.append(c));
    return e;
  }

  const MODE_NAME = { visual: "visual", speech: "speech", screen: "screen text" };
  const MODE_HINT = { visual: "seen in the picture", speech: "said", screen: "written on screen" };

  // The snippet as text with the query's words in <mark>, at the character spans the service gives.
  function snippet(text, highlights) {
    const p = el("p", "snippet");
    let at = 0;
    for (const [start, end] of highlights || []) {
      p.append(text.slice(at, start), el("mark", "", text.slice(start, end)));
      at = end;
    }
    p.append(text.slice(at));
    p.title = p.textContent;
    return p;
  }

  function card(m) {
    const title = m.title || `Video ${m.video_id}`;
    const img = el("img", "thumb");
    img.alt = `${title} at ${fmt(m.start_s)}`;
    const box = el("div", "thumb-box loading", [img, el("span", "range", `${fmt(m.start_s)}–${fmt(m.end_s)}`)]);
    const c = el("button", "result", [
      box,
      el("div", "meta", [el("div", "title", title), el("span", "score", m.score.toFixed(3))]),
    ]);
    const matched = m.matched || [];
    if (matched.length) {
      c.append(el("div", "matched", matched.map((k) => {
        const b = el("span", "badge badge-" + k, MODE_NAME[k] || k);
        b.title = "Found in what is " + (MODE_HINT[k] || k);
        return b;
      })));
    }
    if (m.snippet) {
      const said = snippet(m.snippet, m.highlights);
      if (m.language && m.language !== "en") said.lang = m.language; // read in its language
      c.append(said);
    }
    if (m.snippet_english) { // said in another language: its English rendering below
      const english = snippet(m.snippet_english, m.highlights_english);
      english.classList.add("snippet-english");
      english.lang = "en";
      english.prepend(el("span", "lang", `${m.language || "?"} → en `));
      c.append(english);
    }
    c.type = "button";
    c.title = `Play ${title} from ${fmt(m.start_s)}`;
    Object.assign(c.dataset, { videoId: m.video_id, start: m.start_s, end: m.end_s, matched: matched.join(",") });
    c.onclick = () => play(m, title);
    const broken = () => { box.classList.remove("loading"); box.classList.add("broken"); img.classList.add("broken"); };
    img.onload = () => box.classList.remove("loading");
    img.onerror = broken;
    api(m.thumbnail_url)
      .then((r) => r.blob())
      .then((b) => { const u = URL.createObjectURL(b); thumbUrls.push(u); img.src = u; })
      .catch(broken);
    return c;
  }

  $("search-form").onsubmit = (ev) => {
    ev.preventDefault();
    const text = $("search-input").value.trim();
    if (text) { setQueryFile(null); search({ text, modalities: chosenModes() }); }
    else if (queryFile) search({ file: queryFile });
    else $("search-input").focus();
  };
  $("more-button").onclick = () => lastQuery && cursor && search(lastQuery, cursor);
  $("top-k").onchange = () => lastQuery && search(lastQuery);

  function useFile(file) {
    if (!file) return;
    if (!/^(image|video)\//.test(file.type)) { showError(new Error(`${file.name} is not an image or a video`)); return; }
    $("search-input").value = "";
    setQueryFile(file);
    search({ file });
  }
  $("query-file").onchange = () => useFile($("query-file").files[0]);
  $("query-clear").onclick = (ev) => { ev.preventDefault(); setQueryFile(null); };
  const drop = $("drop-zone");
  drop.ondragover = (ev) => { ev.preventDefault(); drop.classList.add("over"); };
  drop.ondragleave = () => drop.classList.remove("over");
  drop.ondrop = (ev) => { ev.preventDefault(); drop.classList.remove("over"); useFile(ev.dataTransfer.files[0]); };

  // -- player ---------------------------------------------------------------------------
  let playSeq = 0;
  let playing = null; // {videoId, at (the last time played), refreshed (a new URL was tried since it last played)}

  // Signed media URLs (POST /v1/videos/{id}/media-url), by video: {url, until (ms, this browser's
  // clock, from the service's expires_in_s)}; reused while more than a minute of one is left. A URL
  // that runs out while playing (a long film, a long pause) is replaced: see the player's onerror.
  const signed = new Map();
  async function mediaUrl(videoId, fresh = false) {
    const have = signed.get(videoId);
    if (!fresh && have && have.until - Date.now() > 60_000) return have.url;
    const body = await (await api(`/v1/videos/${videoId}/media-url`, { method: "POST" })).json();
    signed.set(videoId, { url: body.url, until: Date.now() + body.expires_in_s * 1000 });
    return body.url;
  }
  const absolute = (url) => new URL(url, location.href).href;

  // Subtitles: what is said (as said, and in English where it was said in another language), and
  // what is written on screen, as tracks. A <track> cannot send the key, so each WebVTT file is
  // fetched with it and given to its track as a blob: URL (the CSP's media-src, which governs
  // tracks, allows blob:). A video with no words of a kind gets no track of it, and one whose
  // speech is English no English rendering; the "Subtitles" choice shows speech unless the viewer
  // picks otherwise. Each file's "Language:" header names its track's language (srclang).
  const TRACKS = [ // [track, label, the transcript route's query]
    ["speech", "Speech", "kind=speech"],
    ["english", "Speech in English", "kind=speech&lang=en"],
    ["screen", "Screen text", "kind=screen"],
  ];
  const SHOWS = { speech: ["speech"], english: ["english"], screen: ["screen"], both: ["speech", "screen"], off: [] }; // choice -> tracks
  const languageOf = (vtt) => (/^Language: *([a-z]{2,3})\s*$/m.exec(vtt.split("\n\n")[0]) || [])[1] || "";
  let trackUrls = [];

  async function subtitles(videoId, seq) {
    const video = $("player");
    const files = await Promise.all(TRACKS.map(([, , query]) =>
      api(`/v1/videos/${videoId}/transcript?format=vtt&${query}`).then((r) => r.text()).catch(() => "")));
    if (seq !== playSeq) return;
    video.querySelectorAll("track").forEach((t) => t.remove());
    trackUrls.forEach((u) => URL.revokeObjectURL(u));
    trackUrls = [];
    const spoken = languageOf(files[0]);
    TRACKS.forEach(([kind, label], i) => {
      if (!files[i].includes("-->")) return; // no cues
      if (kind === "english" && (!spoken || spoken === "en")) return; // said in English already
      const srclang = languageOf(files[i]);
      const t = document.createElement("track");
      Object.assign(t, {
        kind: "subtitles",
        label: kind === "speech" && srclang ? `${label} (${srclang})` : label,
        src: URL.createObjectURL(new Blob([files[i]], { type: "text/vtt" })),
      });
      if (srclang) t.srclang = srclang;
      t.dataset.kind = kind;
      trackUrls.push(t.src);
      video.append(t);
    });
    video.dataset.subtitlesOf = videoId; // which video's tracks these are
    const have = new Set([...video.querySelectorAll("track")].map((t) => t.dataset.kind));
    for (const o of $("subs").options) o.hidden = !SHOWS[o.value].every((k) => have.has(k));
    $("subs-speech").textContent = have.has("english") ? `Speech as said (${spoken})` : "Speech";
    if ($("subs").selectedOptions[0].hidden) $("subs").value = have.has("speech") ? "speech" : "off";
    $("subs-row").hidden = have.size === 0;
    showSubtitles();
  }

  // Every track loads its cues ("hidden"); the chosen ones are shown.
  function showSubtitles() {
    const pick = $("subs").value;
    for (const t of $("player").querySelectorAll("track")) {
      t.track.mode = SHOWS[pick].includes(t.dataset.kind) ? "showing" : "hidden";
    }
  }
  $("subs").onchange = showSubtitles;
  // The player's own captions menu changes the tracks too: the choice follows it.
  $("player").textTracks.onchange = () => {
    const shown = [...$("player").querySelectorAll("track")].filter((t) => t.track.mode === "showing");
    const kinds = shown.map((t) => t.dataset.kind).sort().join();
    $("subs").value = Object.keys(SHOWS).find((c) => [...SHOWS[c]].sort().join() === kinds) ?? "both";
  };

  // Play video m.video_id from m.start_s: a search's moment (its range and score shown, the
  // timeline marking it), or a library entry ({video_id, start_s: 0, duration_s}).
  async function play(m, title) {
    const seq = ++playSeq;
    const video = $("player");
    $("player-title").textContent = title;
    $("player-range").textContent = m.score !== undefined ? `${fmt(m.start_s)}–${fmt(m.end_s)} · score ${m.score.toFixed(3)}`
      : m.duration_s ? fmt(m.duration_s) : "";
    $("player-panel").hidden = false;
    $("player-loading").hidden = false;
    video.pause();
    subtitles(m.video_id, seq);
    let url;
    try { url = await mediaUrl(m.video_id); }
    catch (err) { $("player-panel").hidden = true; showError(err); return; }
    if (seq !== playSeq) return;
    playing = { videoId: m.video_id, at: m.start_s, refreshed: false };
    marks(m);
    load(url, m.start_s, true);
  }

  // Point the player at url and, once it knows the video, seek to `at` (and play, if `resume`).
  function load(url, at, resume) {
    const video = $("player");
    const start = () => {
      video.currentTime = at;
      if (resume) video.play().catch(() => {});
      $("player-loading").hidden = true;
      layoutMarks();
    };
    if (video.src === absolute(url) && video.readyState >= 1) start();
    else { video.onloadedmetadata = start; video.src = url; }
  }

  // A range request refused (the URL ran out mid-film, or the key changed): ask for a new URL
  // once and carry on from where it was; a second error in a row is the video itself.
  $("player").onerror = async () => {
    const video = $("player");
    if ($("player-panel").hidden || !playing) return;
    if (!playing.refreshed) {
      playing.refreshed = true;
      const seq = playSeq, resume = !video.paused;
      try {
        const url = await mediaUrl(playing.videoId, true);
        if (seq === playSeq) load(url, playing.at, resume);
        return;
      } catch (err) { if (seq === playSeq) showError(err); }
    }
    $("player-loading").hidden = true;
    showError(new Error("this browser cannot play the video"));
  };
  $("player").addEventListener("playing", () => { if (playing) playing.refreshed = false; });
  $("player").addEventListener("timeupdate", () => {
    const video = $("player");
    if (playing && !video.seeking && video.readyState >= 1) playing.at = video.currentTime; // not a (re)load's reset to 0
    followMarks();
  });
  $("player").addEventListener("durationchange", () => layoutMarks());

  // The timeline under the video: a mark per moment of the current search in this video (the
  // one playing highlighted); a mark is a button that seeks there. Hidden where there are none.
  function marks(m) {
    const bar = $("timeline");
    const mine = found.filter((r) => r.video_id === m.video_id).sort((a, b) => a.start_s - b.start_s);
    bar.querySelectorAll(".mark").forEach((b) => b.remove());
    for (const r of mine) {
      const b = el("button", "mark");
      b.type = "button";
      b.title = `${fmt(r.start_s)}–${fmt(r.end_s)} · score ${r.score.toFixed(3)}`;
      b.setAttribute("aria-label", "Moment " + b.title);
      Object.assign(b.dataset, { start: r.start_s, end: r.end_s });
      b.onclick = () => {
        const video = $("player");
        video.currentTime = r.start_s;
        video.play().catch(() => {});
        highlight(b);
      };
      if (r.start_s === m.start_s && r.end_s === m.end_s) highlight(b);
      bar.append(b);
    }
    bar.hidden = mine.length === 0;
    layoutMarks();
  }
  function highlight(mark) {
    $("timeline").querySelectorAll(".mark.current").forEach((b) => { b.classList.remove("current"); b.removeAttribute("aria-current"); });
    mark.classList.add("current");
    mark.setAttribute("aria-current", "true");
  }
  // Marks sit at their share of the video's length, known once it loads.
  function layoutMarks() {
    const d = $("player").duration;
    if (!(d > 0)) return;
    for (const b of $("timeline").querySelectorAll(".mark")) {
      const start = Math.min(Number(b.dataset.start), d), end = Math.min(Number(b.dataset.end), d);
      b.style.left = `${(100 * start) / d}%`;
      b.style.width = `max(6px, ${(100 * (end - start)) / d}%)`;
    }
    followMarks();
  }
  // The playhead, and the mark it is in highlighted (the last one it was in stays so between marks).
  function followMarks() {
    const video = $("player"), d = video.duration;
    if ($("timeline").hidden || !(d > 0)) return;
    $("timeline-head").style.left = `${(100 * Math.min(video.currentTime, d)) / d}%`;
    const t = video.currentTime;
    const inside = [...$("timeline").querySelectorAll(".mark")].find((b) => t >= Number(b.dataset.start) - 0.05 && t < Number(b.dataset.end));
    if (inside && !inside.classList.contains("current")) highlight(inside);
  }

  function closePlayer() { $("player").pause(); $("player-panel").hidden = true; playSeq++; playing = null; }
  $("player-close").onclick = closePlayer;
  $("player-panel").onclick = (ev) => { if (ev.target === $("player-panel")) closePlayer(); };
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && !$("player-panel").hidden) closePlayer(); });

  // -- views: search and library ----------------------------------------------------------
  // Two tabs (arrow keys move between them, as in any tab list); the library loads when shown.
  const VIEWS = ["search", "library"];
  function showView(name, focus = false) {
    for (const v of VIEWS) {
      const on = v === name;
      $("tab-" + v).setAttribute("aria-selected", String(on));
      $("tab-" + v).tabIndex = on ? 0 : -1;
      $(v + "-view").hidden = !on;
    }
    if (focus) $("tab-" + name).focus();
    if (name === "library") loadLibrary();
    else clearTimeout(libraryTimer);
  }
  VIEWS.forEach((v, i) => {
    $("tab-" + v).onclick = () => showView(v);
    $("tab-" + v).onkeydown = (ev) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[ev.key];
      if (step) { ev.preventDefault(); showView(VIEWS[(i + step + VIEWS.length) % VIEWS.length], true); }
    };
  });

  // -- library ----------------------------------------------------------------------------
  // Every video, oldest first (GET /v1/videos and its cursor), with its state. While any is not
  // final (queued or indexing) and the library is in view, it is asked again every 2 s. Rows are
  // kept by video and updated in place, so a refresh moves neither focus nor a pending delete.
  const LIBRARY_PAGE = 50;
  const LIBRARY_POLL_MS = 2000;
  let libraryVideos = [];
  let libraryCursor = null;
  let librarySeq = 0;
  let libraryTimer = 0;
  const libraryRows = new Map(); // video_id -> <li>
  const libraryThumbs = new Map(); // video_id -> object URL
  const libraryShown = () => !$("library-view").hidden && !document.hidden;

  // A refresh asks for as many videos as are shown (a page at least), so none drops off the end.
  async function loadLibrary(more = false) {
    clearTimeout(libraryTimer);
    const seq = ++librarySeq;
    const limit = more ? LIBRARY_PAGE : Math.min(500, Math.max(LIBRARY_PAGE, libraryVideos.length));
    const query = new URLSearchParams({ limit });
    if (more && libraryCursor) query.set("cursor", libraryCursor);
    try {
      const page = await (await api("/v1/videos?" + query)).json();
      if (seq !== librarySeq) return;
      libraryVideos = more ? libraryVideos.concat(page.videos) : page.videos;
      libraryCursor = page.next_cursor;
      renderLibrary();
    } catch (err) {
      if (seq === librarySeq) showError(err);
      return;
    }
    if (libraryShown() && libraryVideos.some((v) => !FINAL.has(v.status))) {
      libraryTimer = setTimeout(() => loadLibrary(), LIBRARY_POLL_MS);
    }
  }
  $("library-more").onclick = () => loadLibrary(true);
  document.addEventListener("visibilitychange", () => {
    if (libraryShown()) loadLibrary();
    else clearTimeout(libraryTimer);
  });

  function renderLibrary() {
    const list = $("library");
    const rows = libraryVideos.map((v) => {
      let row = libraryRows.get(v.video_id);
      if (!row) libraryRows.set(v.video_id, (row = libraryRow(v)));
      updateRow(row, v);
      return row;
    });
    const kept = new Set(libraryVideos.map((v) => v.video_id));
    for (const id of [...libraryRows.keys()]) if (!kept.has(id)) forgetRow(id);
    list.querySelector(".empty")?.remove();
    rows.forEach((row, i) => { if (list.children[i] !== row) list.insertBefore(row, list.children[i] || null); });
    while (list.children.length > rows.length) list.lastElementChild.remove();
    if (!rows.length) list.append(el("li", "empty", "No videos yet: add one with “Add a video”."));
    const n = rows.length;
    $("library-head").textContent = n ? `${n}${libraryCursor ? "+" : ""} video${n === 1 ? "" : "s"}` : "";
    $("library-more").hidden = !libraryCursor;
  }

  function forgetRow(id) {
    libraryRows.get(id)?.remove();
    libraryRows.delete(id);
    if (libraryThumbs.has(id)) URL.revokeObjectURL(libraryThumbs.get(id));
    libraryThumbs.delete(id);
  }

  function libraryRow(v) {
    const img = el("img", "thumb");
    img.alt = "";
    const row = el("li", "video-row", [
      el("div", "thumb-box lib-thumb", [img, el("span", "range lib-duration")]),
      el("div", "lib-info", [
        el("div", "title"),
        el("div", "lib-added muted"),
        el("div", "lib-status"),
      ]),
      el("div", "lib-actions"),
    ]);
    row.dataset.videoId = v.video_id;
    return row;
  }

  // What a video's state reads as: queued; indexing, with what its job does and how far it got;
  // ready; failed, with where and why.
  function statusText(v) {
    const stage = v.stage ? STAGE[v.stage] || v.stage : "";
    if (v.status === "ready") return `Ready · ${v.frames_indexed} frame${v.frames_indexed === 1 ? "" : "s"} indexed`;
    if (v.status === "failed") return `Failed${stage ? " while " + stage : ""}: ${v.error || "unknown error"}`;
    if (v.status === "queued") return "Queued";
    return `Indexing… ${Math.round(v.progress * 100)}%${stage ? " · " + stage : ""}`;
  }

  function updateRow(row, v) {
    const title = v.title || `Video ${v.video_id}`;
    row.querySelector(".title").textContent = title;
    row.querySelector(".title").title = title;
    row.querySelector(".lib-duration").textContent = v.duration_s ? fmt(v.duration_s) : "";
    row.querySelector(".lib-duration").hidden = !v.duration_s;
    const added = new Date(v.created_at);
    row.querySelector(".lib-added").textContent = `Added ${added.toLocaleDateString()} ${added.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}`;
    row.querySelector(".lib-status").textContent = statusText(v);
    row.video = v;
    if (v.status === "ready" && !libraryThumbs.has(v.video_id)) libraryThumb(row, v);
    if (row.dataset.status !== v.status && !row.classList.contains("confirming")) {
      row.dataset.status = v.status;
      actions(row, v);
    }
  }

  function libraryThumb(row, v) {
    libraryThumbs.set(v.video_id, null); // asked for: once
    const img = row.querySelector("img");
    const t = Math.floor(Math.min(1, (v.duration_s || 0) / 2) * 100) / 100;
    api(`/v1/videos/${v.video_id}/thumbnail?t=${t}`)
      .then((r) => r.blob())
      .then((b) => {
        if (libraryRows.get(v.video_id) !== row) return;
        const u = URL.createObjectURL(b);
        libraryThumbs.set(v.video_id, u);
        img.src = u;
      })
      .catch(() => row.querySelector(".lib-thumb").classList.add("broken"));
  }

  function button(text, cls, onclick, label) {
    const b = el("button", cls, text);
    b.type = "button";
    b.onclick = onclick;
    if (label) b.setAttribute("aria-label", label);
    return b;
  }

  // A row's buttons: play (ready), retry (failed), delete (with a confirmation in the row).
  function actions(row, v) {
    const box = row.querySelector(".lib-actions");
    const title = () => row.video.title || `Video ${v.video_id}`;
    const shown = [];
    if (v.status === "ready") {
      shown.push(button("Play", "primary lib-play", () => play({ video_id: v.video_id, start_s: 0, duration_s: row.video.duration_s }, title()),
        `Play ${title()}`));
    }
    if (v.status === "failed") shown.push(button("Retry", "lib-retry", () => retry(row, v.video_id), `Retry ${title()}`));
    shown.push(button("Delete", "lib-delete", () => confirmDelete(row, v.video_id), `Delete ${title()}`));
    box.replaceChildren(...shown);
  }

  function confirmDelete(row, videoId) {
    const box = row.querySelector(".lib-actions");
    const done = (focus) => { row.classList.remove("confirming"); actions(row, row.video); if (focus) row.querySelector(".lib-delete").focus(); };
    const yes = button("Delete", "danger lib-confirm", async () => {
      yes.disabled = true;
      try {
        await api(`/v1/videos/${videoId}`, { method: "DELETE" });
        signed.delete(videoId);
        libraryVideos = libraryVideos.filter((v) => v.video_id !== videoId);
        renderLibrary();
      } catch (err) { showError(err); done(false); }
    });
    const no = button("Cancel", "lib-cancel", () => done(true));
    row.classList.add("confirming");
    box.replaceChildren(el("span", "confirm-text", "Delete this video?"), yes, no);
    box.onkeydown = (ev) => { if (ev.key === "Escape" && row.classList.contains("confirming")) { ev.stopPropagation(); done(true); } };
    no.focus(); // the safe choice first
  }

  async function retry(row, videoId) {
    const b = row.querySelector(".lib-retry");
    if (b) b.disabled = true;
    try {
      await api(`/v1/videos/${videoId}/retry`, { method: "POST" });
    } catch (err) {
      showError(err);
      if (b) b.disabled = false;
    }
    loadLibrary();
  }

  // -- upload + job progress ------------------------------------------------------------
  // A job's warnings: what went wrong without failing it (a video without audio, say).
  function setWarnings(warnings) {
    $("job-warnings").replaceChildren(...(warnings || []).map((w) => el("li", "", w)));
    $("job-warnings").hidden = !$("job-warnings").children.length;
  }

  function setJob(state, text, value) {
    $("job").hidden = false;
    $("job").dataset.status = state;
    $("job-status").textContent = text;
    if (value === null) $("job-progress").removeAttribute("value");
    else $("job-progress").value = value;
  }

  function upload(form) {
    return new Promise((resolve, reject) => {
      const x = new XMLHttpRequest();
      x.open("POST", "/v1/videos");
      x.setRequestHeader("Authorization", "Bearer " + key);
      x.upload.onprogress = (e) => {
        if (e.lengthComputable) setJob("uploading", `Uploading… ${Math.round((100 * e.loaded) / e.total)}%`, e.loaded / e.total);
      };
      x.onload = async () => {
        if (x.status >= 200 && x.status < 300) return resolve(JSON.parse(x.responseText));
        const err = await errorOf(x.status, x.responseText);
        if (x.status === 401) askKey("The API key was not accepted: " + err.message);
        reject(err);
      };
      x.onerror = () => reject(new ApiError(0, "network", "could not reach the service"));
      x.send(form);
    });
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const LABEL = { queued: "Queued", decoding: "Decoding", indexing: "Indexing", ready: "Ready", failed: "Failed" };
  const STAGE = { fetching: "fetching the video", probing: "reading its format", frames: "reading frames",
    speech: "transcribing speech", saving: "saving" };
  const stageOf = (job) => (job.stage ? STAGE[job.stage] || job.stage : "");
  const FINAL = new Set(["ready", "failed"]);

  $("upload-form").onsubmit = async (ev) => {
    ev.preventDefault();
    const file = $("upload-file").files[0];
    if (!file) return;
    const title = $("upload-title").value.trim();
    const form = new FormData();
    form.append("file", file);
    if (title) form.append("title", title);
    $("upload-button").disabled = true;
    $("job-name").textContent = title || file.name;
    delete $("job").dataset.videoId;
    setWarnings([]);
    setJob("uploading", "Uploading… 0%", 0);
    try {
      const accepted = await upload(form);
      $("job").dataset.videoId = accepted.video_id;
      $("job").dataset.jobId = accepted.job_id;
      setJob("queued", "Queued", null);
      if (libraryShown()) loadLibrary(); // the new video in the library, and its progress there
      for (;;) {
        const job = await (await api(`/v1/jobs/${accepted.job_id}`)).json();
        const frames = `${job.frames_indexed} frame${job.frames_indexed === 1 ? "" : "s"} indexed`;
        const stage = stageOf(job);
        setWarnings(job.warnings);
        if (job.status === "ready") { setJob("ready", `Ready · ${frames}`, 1); break; }
        if (job.status === "failed") {
          setJob("failed", `Failed${stage ? " while " + stage : ""}: ${job.error || "unknown error"}`, job.progress);
          break;
        }
        const pct = job.status === "queued" ? "" : ` ${Math.round(job.progress * 100)}%`;
        const doing = stage ? ` · ${stage}` : "";
        setJob(job.status, `${LABEL[job.status] || job.status}…${pct}${doing} · ${frames}`,
          job.status === "queued" ? null : job.progress);
        await sleep(500);
      }
      $("upload-form").reset();
    } catch (err) {
      setJob("failed", `Failed: ${err.message}`, 0);
      showError(err);
    } finally {
      $("upload-button").disabled = false;
    }
  };

  // -- start ----------------------------------------------------------------------------
  if (!key) askKey("");
  else Promise.all([loadCollections(), loadLanguages()]).catch(showError); // asks again if the stored key went stale
})();
