"""The web view's pages as documents: the main page, the history pages, the login page, an error page.

Server-rendered and whole: with JavaScript off every page shows the state as it was when loaded and every
form works (a POST, then a redirect back). With it on, web/static/live.js follows the stream and changes
the page in place (web/stream.py). Only the panels and turns come from the agent's data, already escaped.
"""

from __future__ import annotations

from hyperhive import __version__
from hyperhive.numbers import count
from hyperhive.service.web.lines import LIVE, esc
from hyperhive.service.web.panels import CSRF

# The notes a redirect after a form may ask the page to show (`/?done=<name>&id=<number>`): text of ours.
NOTES = {
    "sent": "wake {id} sent to the agent",
    "cancelled": "turn {id} is being cancelled, with the background tasks it started; its wakes are set aside",
    "cancelled-kept": "turn {id} is being cancelled, its background tasks kept running; its wakes are set aside",
    "killed": "task {id} killed",
    "ended": "task {id} had ended already",
    "subagent": "sub-agent {id} cancelled",
    "reminder": "reminder {id} cancelled",
    "messaged": "message sent to sub-agent {id}",
    "allowed": "permission request {id} allowed",
    "denied": "permission request {id} denied; the agent is told",
    "revoked": "rule {id} revoked: its tool is asked about again",
}


def document(title: str, body: str, *, script: str | None = None) -> str:
    tail = f'<script src="/static/{script}"></script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{esc(title)}</title><link rel="stylesheet" href="/static/style.css"></head>'
        f"<body>{body}{tail}</body></html>"
    )


def top(where: str, *, drawn: str, headline: str = "") -> str:
    """The bar on every page: the pages, whether this one follows the stream (`drawn`: when it was drawn,
    which is all a page without the stream can say; live.js says `live` once it follows), log out, and the
    headline below them (panels.headline: who works, on which turn, for how long)."""
    nav = "".join(
        f'<a href="{href}"{" class=here aria-current=page" if href == where else ""}>{name}</a>'
        for href, name in (("/", "now"), ("/turns", "turns"), ("/outbox", "outbox"))
    )
    logout = (
        f'<form method="post" action="/logout" class="inline"><input type="hidden" name="csrf" value="{CSRF}">'
        '<button type="submit">Log out</button></form>'
    )
    return (
        f'<header class="top"><h1>hyperhive</h1><span class="version">{esc(__version__)}</span>'
        f'<span id="stream" class="off">as of {esc(drawn)}</span>'
        f'<nav aria-label="pages">{nav}</nav>{logout}{headline}</header>'
    )


def note(done: str | None, number: str | None) -> str:
    text = NOTES.get(done or "")
    shown = count(number)
    if text is None or shown is None:
        return ""
    return f'<p class="note" id="note" tabindex="-1">{esc(text.format(id=shown))}</p>'


def main(
    *, title: str, drawn: str, events: str, turns_html: str, panels: dict[str, str], request_id: str, notice: str
) -> str:
    """The page of now: the agent, the send box, the turns in flight, and the side panels (the Hive panel
    first, in a hive). `announce` is the polite live region live.js tells of turn ends, replies and the hive's
    lines in (a screen reader says it when idle)."""
    send = (
        '<section class="panel" id="send" aria-labelledby="send-title"><h2 id="send-title">Send</h2>'
        '<form method="post" action="/send">'
        f'<input type="hidden" name="csrf" value="{CSRF}">'
        f'<input type="hidden" name="request_id" value="{esc(request_id)}">'
        '<label for="send-body">Message to the agent</label>'
        '<textarea id="send-body" name="body" rows="3" required aria-describedby="send-hint"></textarea>'
        '<div class="row"><button type="submit">Send</button>'
        '<span class="hint" id="send-hint">a wake from the operator; Ctrl+Enter (⌘+Enter) sends</span></div>'
        "</form></section>"
    )
    live = (
        f'<section class="panel" id="live" data-events="{esc(events)}" aria-labelledby="live-title">'
        f'<h2 id="live-title">Live turns</h2><div id="{LIVE}">{turns_html}</div>'
        '<p class="none empty">no turn in flight: the next one shows here as it happens</p></section>'
    )
    side = panels.get("hive", "") + "".join(panels[n] for n in ("queue", "tasks", "subagents", "outbox"))
    body = (
        f"{top('/', drawn=drawn, headline=panels['headline'])}{notice}"
        '<div id="announce" class="sr-only" role="status" aria-live="polite"></div>'
        f'<main><div class="col wide">{panels["permissions"]}{panels["status"]}{send}{live}{panels["turns"]}</div>'
        f'<div class="col side">{side}</div></main>'
    )
    return document(title, body, script="live.js")


def listing(where: str, title: str, content: str, older: str | None, *, drawn: str, headline: str = "") -> str:
    more = f'<p><a href="{esc(older)}">older</a></p>' if older else ""
    section = f'<section class="panel" aria-labelledby="list-title"><h2 id="list-title">{esc(title)}</h2>'
    bar = top(where, drawn=drawn, headline=headline)
    return document(f"{title} · hyperhive", f'{bar}<main class="one">{section}{content}{more}</section></main>')


def detail(title: str, sections: str, *, drawn: str, headline: str, notice: str = "") -> str:
    """A page of one thing (a turn, a sub-agent): its sections, drawn as of now (no stream follows it); its
    forms are posted in place by live.js, whose answer's sections replace the page's."""
    bar = top("", drawn=drawn, headline=headline)
    body = (
        f"{bar}{notice}"
        '<div id="announce" class="sr-only" role="status" aria-live="polite"></div>'
        f'<main class="one"><h1 class="page">{esc(title)}</h1>{sections}</main>'
    )
    return document(f"{title} · hyperhive", body, script="live.js")


def login(problem: str | None = None) -> str:
    said = f'<p class="why" role="alert">{esc(problem)}</p>' if problem else ""
    body = (
        '<main class="one"><section class="panel login"><h1>hyperhive</h1>'
        "<p>Run <code>hyperhive web-login</code> where the service runs and open the link it prints, "
        "or paste its code here.</p>"
        f'{said}<form method="post" action="/login" id="login"><label for="code">Login code</label>'
        '<input id="code" name="code" autocomplete="off" required>'
        '<button type="submit">Log in</button></form></section></main>'
    )
    return document("log in · hyperhive", body, script="login.js")


def problem(status: int, text: str, *, back: str = "/") -> str:
    return document(
        "refused · hyperhive",
        f'<main class="one"><section class="panel"><h1>{status}</h1><p class="why">{esc(text)}</p>'
        f'<p><a href="{esc(back)}">back</a></p></section></main>',
    )
