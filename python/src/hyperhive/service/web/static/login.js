// The login link carries its one-time code in the fragment (`/login#code=...`), which a browser never sends:
// it is taken out of the address bar and history, and posted as the form would post it by hand.
//
// Without a code, a browser logged in already (its session's base kept by live.js in this origin's
// localStorage) is taken to its pages under that base: the page asked for (`?next=`) or the main one.
// `?again` (the session is over, or logged out) forgets the base.
"use strict";
(() => {
  const form = document.getElementById("login");
  const code = new URLSearchParams(location.hash.slice(1)).get("code");
  const query = new URLSearchParams(location.search);
  if (form && code) {
    history.replaceState(null, "", location.pathname);
    form.elements.code.value = code;
    form.submit();
    return;
  }
  try {
    if (query.has("again")) {
      localStorage.removeItem("hyperhive-base");
      return;
    }
    const base = localStorage.getItem("hyperhive-base");
    if (!base || !/^\/s\/[A-Za-z0-9_-]{22}$/.test(base)) return;
    const next = query.get("next");
    location.replace(base + (next && /^\/[A-Za-z0-9/?=&%._-]*$/.test(next) && !next.startsWith("//") ? next : "/"));
  } catch {
    // storage off: the form is there
  }
})();
