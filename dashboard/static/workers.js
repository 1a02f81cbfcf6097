/* The Workers page: online workers (Celery inspect) and what the store saw of them. */
"use strict";

(function () {
  const cfg = JSON.parse(document.getElementById("workers-config").textContent);
  const body = document.querySelector("#workers-table tbody");

  function status(w) {
    if (w.online === true) return SS.el("span", { class: "badge complete", text: "online" });
    if (w.online === false) return SS.el("span", { class: "badge failed", text: "not answering" });
    return SS.el("span", { class: "badge queued", text: "seen in store" });
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
    body.replaceChildren(...d.workers.map((w) => SS.el("tr", { "data-name": w.name },
      SS.el("td", {}, status(w)),
      SS.el("td", { class: "mono", text: w.name }),
      SS.el("td", { text: w.host || "–" }),
      SS.el("td", { text: w.device || "–" }),
      SS.el("td", {}, w.current.length ? w.current.map((id, i) => [i ? ", " : "",
        SS.el("a", { href: cfg.trialsUrl + id, class: "mono", text: id })]) : "idle"),
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
