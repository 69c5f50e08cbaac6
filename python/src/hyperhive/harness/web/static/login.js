// The login link carries its one-time code in the fragment (`/login#code=...`), which a browser never sends:
// it is taken out of the address bar and history, and posted as the form would post it by hand.
"use strict";
(() => {
  const form = document.getElementById("login");
  const code = new URLSearchParams(location.hash.slice(1)).get("code");
  if (!form || !code) return;
  history.replaceState(null, "", location.pathname);
  form.elements.code.value = code;
  form.submit();
})();
