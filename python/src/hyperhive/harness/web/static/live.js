// The web view's live stream (harness/web/stream.py): every message is a list of changes to the page, each
// an element's HTML as the server drew it (every text in it escaped there). The browser resumes a lost
// stream by itself, with the id of the last message it got; nothing else of the page needs this script.
"use strict";
(() => {
  const live = document.getElementById("live");
  const badge = document.getElementById("stream");
  if (!live || !window.EventSource) return;
  const say = (text, state) => {
    badge.textContent = text;
    badge.className = state;
  };
  const apply = (op) => {
    if (op.op === "replace") {
      const element = document.getElementById(op.id);
      if (element) element.outerHTML = op.html;
    } else if (op.op === "append") {
      const element = op.to.map((id) => document.getElementById(id)).find(Boolean);
      if (!element) return;
      element.insertAdjacentHTML("beforeend", op.html);
      if (op.keep) while (element.children.length > op.keep) element.firstElementChild.remove();
    }
  };
  say("connecting…", "off");
  const source = new EventSource(live.dataset.events);
  source.onopen = () => say("live", "on");
  source.onerror = () =>
    say(source.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting…", "off");
  source.onmessage = (message) => JSON.parse(message.data).forEach(apply);
})();
