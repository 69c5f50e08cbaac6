// The pages' script (each works without it: every form posts and comes back to the page). The main page
// follows the live stream; a page of one turn or sub-agent only posts its forms in place.
//
// The live stream (service/web/stream.py): every message is a list of changes to the page, each an element's
// HTML as the server drew it (every text in it escaped there). The browser resumes a lost stream by itself,
// with the id of the last message it got; a stream refused (503 when 32 pages follow the service already, or
// the session over) is asked for again by the page, after 1 s, then twice as long each time up to 30 s.
//
// Every page lives under the session's base (`/s/<key>/`, where its cookie is sent: service/web/auth.py);
// the base is kept in this origin's localStorage, so that the login page can take a logged-in browser back.
//
// The forms: posted with fetch, so that the page stays as it was (open details, the scroll); the answer is
// the page the form's redirect leads to, whose note is shown for a while and whose panels replace the
// page's when they are newer than what the stream has shown. The send box sends on Ctrl+Enter (⌘+Enter).
// Turn ends, new replies and the hive's lines (a message to or from another agent) are said in the page's
// polite live region; the tab's title says the headline's state (the agent's and its tree's), as the bar's
// headline says it.
"use strict";
(() => {
  const NOTE_MS = 8000; // how long a form's note stays
  const RETRY_FIRST_MS = 1000; // a refused stream is asked for again after this, doubled each time
  const RETRY_MAX_MS = 30000;
  const SAID_KEPT = 5; // what the live region keeps of what it said
  const live = document.getElementById("live");
  const pill = document.getElementById("stream");
  const region = document.getElementById("announce");
  document.documentElement.classList.add("js");
  const base = /^\/s\/[A-Za-z0-9_-]{22}(?=\/)/.exec(location.pathname);
  if (base) {
    try {
      localStorage.setItem("hyperhive-base", base[0]);
    } catch {
      // storage off: the login page cannot take this browser back, nothing else changes
    }
  }

  // -- what a screen reader is told, and the title -----------------------------------------------------
  const announce = (text) => {
    if (!region || !text) return;
    const said = document.createElement("p");
    said.textContent = text.length > 300 ? `${text.slice(0, 299)}…` : text;
    region.append(said);
    while (region.children.length > SAID_KEPT) region.firstElementChild.remove();
  };
  const retitle = () => {
    const headline = document.getElementById("panel-headline");
    if (live && headline && headline.dataset.title) document.title = headline.dataset.title;
  };
  const newestReply = () => {
    const item = document.querySelector("#panel-outbox .list > li");
    return item ? { who: item.querySelector(".who")?.textContent, said: item.querySelector(".reply")?.textContent } : {};
  };

  // -- the stream ----------------------------------------------------------------------------------------
  const apply = (op) => {
    if (op.op === "replace") {
      const element = document.getElementById(op.id);
      if (!element) return;
      const before = op.id === "panel-outbox" ? newestReply().who : null;
      element.outerHTML = op.html;
      const turn = /^turn-(\d+)-badge$/.exec(op.id);
      if (turn) announce(`turn ${turn[1]} ${document.getElementById(op.id)?.textContent ?? ""}`);
      if (op.id === "panel-outbox") {
        const after = newestReply();
        if (after.who && after.who !== before) announce(`reply ${after.who}: ${after.said ?? ""}`);
      }
    } else if (op.op === "append") {
      const element = op.to.map((id) => document.getElementById(id)).find(Boolean);
      if (!element) return;
      element.insertAdjacentHTML("beforeend", op.html);
      if (op.keep) {
        // Of the elements of its kind (the turns, the hive's lines), the page keeps the last `keep`.
        const like = [...element.children].filter((child) => !op.kind || child.classList.contains(op.kind));
        like.slice(0, Math.max(0, like.length - op.keep)).forEach((old) => old.remove());
      }
      if (op.kind === "hive-line") announce(element.lastElementChild?.textContent);
    }
  };
  // An event's id is `<the feed's epoch>-<its number>`: the page's stream has shown every event up to `seen`.
  const parse = (id) => {
    const [epoch, seq] = String(id || "").split("-");
    return { epoch, seq: Number(seq) };
  };
  const drawnAfter = (page) => parse(new URLSearchParams(page?.dataset.events?.split("?")[1]).get("after"));
  let seen = drawnAfter(live);
  const say = (text, state) => {
    pill.textContent = text;
    pill.className = state;
  };
  let source = null;
  let retryMs = RETRY_FIRST_MS;
  // From the last event shown: the page's own drawing at first, then what the stream brought.
  const eventsUrl = () => {
    const [path, query] = live.dataset.events.split("?");
    const params = new URLSearchParams(query);
    if (seen.epoch && Number.isFinite(seen.seq)) params.set("after", `${seen.epoch}-${seen.seq}`);
    return `${path}?${params}`;
  };
  const follow = () => {
    const current = new EventSource(eventsUrl());
    source = current;
    current.onopen = () => {
      retryMs = RETRY_FIRST_MS;
      say("live", "on");
    };
    current.onerror = () => {
      if (current.readyState !== EventSource.CLOSED) {
        say("reconnecting…", "off"); // the browser asks again by itself
        return;
      }
      // Refused (the browser gives up on an answer other than a stream): asked again, later each time.
      current.close();
      say(`reconnecting in ${Math.round(retryMs / 1000)} s…`, "off");
      setTimeout(follow, retryMs);
      retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
    };
    current.onmessage = (message) => {
      JSON.parse(message.data).forEach(apply);
      if (message.lastEventId) seen = parse(message.lastEventId);
      retitle();
    };
  };
  if (live && window.EventSource) {
    say("connecting…", "off");
    follow();
  }
  retitle();

  // -- the note a form leaves --------------------------------------------------------------------------
  let noteTimer = 0;
  const showNote = (text, bad) => {
    document.getElementById("note")?.remove();
    clearTimeout(noteTimer);
    const note = document.createElement("p");
    note.id = "note";
    note.className = bad ? "note bad" : "note";
    note.tabIndex = -1;
    note.textContent = text;
    document.querySelector("header.top").after(note);
    announce(text);
    noteTimer = setTimeout(() => note.remove(), NOTE_MS);
    return note;
  };
  const first = document.getElementById("note");
  if (first) {
    showNote(first.textContent, false);
    first.remove();
    history.replaceState(null, "", location.pathname); // a reload does not say it again
  }

  // -- the forms -----------------------------------------------------------------------------------------
  const adopt = (fresh, form) => {
    const note = fresh.getElementById("note");
    if (note) showNote(note.textContent, false);
    if (form.querySelector("textarea")) {
      form.reset(); // a message went: the box is ready for the next
      const id = fresh.querySelector("#send input[name=request_id]");
      if (id && form.elements.request_id) form.elements.request_id.value = id.value; // the next one is another
    }
    const drawn = drawnAfter(fresh.getElementById("live"));
    const following = source && source.readyState === EventSource.OPEN;
    if (following && drawn.epoch === seen.epoch && drawn.seq <= seen.seq) return; // the stream is ahead
    for (const panel of fresh.querySelectorAll("section.panel[id^=panel-], #panel-headline")) {
      const element = document.getElementById(panel.id);
      if (element) element.outerHTML = panel.outerHTML;
    }
    if (live && !following) {
      const turns = fresh.getElementById("live-turns");
      if (turns) document.getElementById("live-turns").outerHTML = turns.outerHTML;
    }
    retitle();
  };
  document.addEventListener("submit", async (event) => {
    const form = event.target;
    const action = form.getAttribute("action");
    if (form.method !== "post" || action === "/logout" || !window.fetch || !window.DOMParser) return;
    event.preventDefault();
    if (form.dataset.busy) return; // a second press while the first is posted: one post
    form.dataset.busy = "1";
    const button = event.submitter || form.querySelector("button");
    button?.setAttribute("aria-disabled", "true");
    try {
      const answer = await fetch(action, { method: "POST", body: new URLSearchParams(new FormData(form)) });
      if (answer.redirected && new URL(answer.url).pathname === "/login") {
        location.assign("/login");
        return;
      }
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      if (answer.ok) adopt(fresh, form);
      else showNote(fresh.querySelector(".why")?.textContent || `refused (${answer.status})`, true);
    } catch (error) {
      showNote(`the service did not answer (${error.message}): try again`, true);
    } finally {
      delete form.dataset.busy;
      button?.removeAttribute("aria-disabled");
      // The button may be gone with its panel: the note takes the focus, where the keyboard goes on from.
      if (!document.contains(button)) document.getElementById("note")?.focus({ preventScroll: true });
    }
  });
  for (const box of document.querySelectorAll("form textarea")) {
    box.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        box.form.requestSubmit();
      }
    });
  }
})();
