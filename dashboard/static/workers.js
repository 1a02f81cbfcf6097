/* The Workers page: online workers (Celery inspect) and what the store saw of them. */
"use strict";

(function () {
  const cfg = JSON.parse(document.getElementById("workers-config").textContent);
  const body = document.querySelector("#workers-table tbody");

  // "online" only for a worker heard from lately (see `dashboard.workers`); others say
  // when they were last seen.
  function status(w, now) {
    if (w.online) return SS.el("span", { class: "badge complete", text: "online" });
    const seen = w.last_seen ? "last seen " + SS.ago(w.last_seen, now) : "not seen";
    return [SS.el("span", { class: "badge offline", text: "offline" }), " ",
      SS.el("span", { class: "muted seen", text: seen })];
  }

  function current(w, now) {
    if (w.current.length) {
      return w.current.map((id, i) => [i ? ", " : "",
        SS.el("a", { href: cfg.trialsUrl + id, class: "mono", text: id })]);
    }
    return w.last_activity ? "idle · last trial activity " + SS.ago(w.last_activity, now)
      : "idle";
  }

  // Which sweep each worker runs now (the fair share gives workers to sweeps).
  function sweepsOf(w) {
    if (!w.sweeps || !w.sweeps.length) return "–";
    return w.sweeps.map((id, i) => [i ? ", " : "",
      SS.el("a", { href: cfg.sweepsUrl + encodeURIComponent(id), class: "mono", text: id })]);
  }

  function render(d) {
    const note = document.getElementById("workers-note");
    if (!d.broker) {
      note.textContent = "No broker configured (SWEEPSTACK_BROKER_URL): workers as the store saw " +
        "them in the last " + d.minutes + " minutes.";
    } else if (d.error) {
      note.textContent = "Could not ask the workers: " + d.error;
    } else {
      note.textContent = d.workers.filter((w) => w.online).length + " online; activity over the " +
        "last " + d.minutes + " minutes.";
    }
    body.replaceChildren(...d.workers.map((w) => SS.el("tr", { "data-name": w.name,
      class: w.online ? "online" : "offline" },
      SS.el("td", {}, status(w, d.now)),
      SS.el("td", { class: "mono", text: w.name }),
      SS.el("td", { text: w.host || "–" }),
      SS.el("td", { text: w.device || "–" }),
      SS.el("td", { class: "sweep-cell" }, sweepsOf(w)),
      SS.el("td", {}, current(w, d.now)),
      SS.el("td", { class: "num", text: SS.num(w.per_minute, 3) }),
      SS.el("td", { class: "num", text: SS.num(w.finished) }),
      SS.el("td", { text: w.last_seen ? SS.time(w.last_seen) + " (" + SS.ago(w.last_seen, d.now) + ")" : "–" }))));
    document.getElementById("workers-empty").hidden = d.workers.length > 0;
  }

  async function step() { render(await SS.getJSON(cfg.dataUrl)); }

  step().then(() => { SS.drawn(); SS.setLive(true, "live"); },
    (error) => SS.setLive(false, "not loaded (" + error.message + ")"));
  SS.poll(step, 3000);
})();
