"""The web view's pages as documents: the main page, the history pages, the login page, an error page.

Server-rendered and whole: with JavaScript off every page shows the state as it was when loaded and every
form works (a POST, then a redirect back). With it on, web/static/live.js follows the stream and changes
the page in place (web/stream.py). Only the panels and turns come from the agent's data, already escaped.
"""

from __future__ import annotations

from hyperhive import __version__
from hyperhive.harness.web.lines import LIVE, esc
from hyperhive.harness.web.panels import CSRF

# The notes a redirect after a form may ask the page to show (`/?done=<name>&id=<number>`): text of ours.
NOTES = {
    "sent": "wake {id} sent to the agent",
    "cancelled": "turn {id} is being cancelled; its wakes are set aside",
    "killed": "task {id} killed",
    "ended": "task {id} had ended already",
    "subagent": "sub-agent {id} cancelled",
    "reminder": "reminder {id} cancelled",
}


def document(title: str, body: str, *, script: str | None = None) -> str:
    tail = f'<script src="/static/{script}"></script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{esc(title)}</title><link rel="stylesheet" href="/static/style.css"></head>'
        f"<body>{body}{tail}</body></html>"
    )


def top(where: str) -> str:
    nav = "".join(
        f'<a href="{href}"{" class=here" if href == where else ""}>{name}</a>'
        for href, name in (("/", "now"), ("/turns", "turns"), ("/outbox", "outbox"))
    )
    logout = (
        f'<form method="post" action="/logout" class="inline"><input type="hidden" name="csrf" value="{CSRF}">'
        '<button type="submit">log out</button></form>'
    )
    return (
        f'<header class="top"><h1>hyperhive</h1><span class="version">{esc(__version__)}</span>'
        f'<span id="stream" class="off">not live: reload to see more</span><nav>{nav}</nav>{logout}</header>'
    )


def note(done: str | None, number: str | None) -> str:
    text = NOTES.get(done or "")
    if text is None or number is None or not number.isdigit() or len(number) > 18:
        return ""
    return f'<p class="note">{esc(text.format(id=int(number)))}</p>'


def main(*, events: str, turns_html: str, panels: dict[str, str], request_id: str, notice: str) -> str:
    """The page of now: the agent, the send box, the turns in flight, and the side panels."""
    send = (
        '<section class="panel" id="send"><h2>Send</h2><form method="post" action="/send">'
        f'<input type="hidden" name="csrf" value="{CSRF}">'
        f'<input type="hidden" name="request_id" value="{esc(request_id)}">'
        '<textarea name="body" rows="3" required placeholder="a message for the agent (a wake from the operator)">'
        '</textarea><button type="submit">Send</button></form></section>'
    )
    live = (
        f'<section class="panel" id="live" data-events="{esc(events)}"><h2>Turns</h2>'
        f'<div id="{LIVE}">{turns_html}</div></section>'
    )
    side = "".join(panels[n] for n in ("queue", "tasks", "subagents", "outbox"))
    body = (
        f'{top("/")}{notice}<main><div class="col wide">{panels["status"]}{send}{live}{panels["turns"]}</div>'
        f'<div class="col side">{side}</div></main>'
    )
    return document("hyperhive", body, script="live.js")


def listing(where: str, title: str, content: str, older: str | None) -> str:
    more = f'<p><a href="{esc(older)}">older</a></p>' if older else ""
    section = f'<section class="panel"><h2>{esc(title)}</h2>{content}{more}</section>'
    return document(f"hyperhive: {title}", f'{top(where)}<main class="one">{section}</main>')


def login(problem: str | None = None) -> str:
    said = f'<p class="why">{esc(problem)}</p>' if problem else ""
    body = (
        '<main class="one"><section class="panel login"><h1>hyperhive</h1>'
        "<p>Run <code>hyperhive web-login</code> where the service runs and open the link it prints, "
        "or paste its code here.</p>"
        f'{said}<form method="post" action="/login" id="login"><input name="code" autocomplete="off" required '
        'placeholder="code"><button type="submit">Log in</button></form></section></main>'
    )
    return document("hyperhive: log in", body, script="login.js")


def problem(status: int, text: str, *, back: str = "/") -> str:
    return document(
        "hyperhive: refused",
        f'<main class="one"><section class="panel"><h2>{status}</h2><p class="why">{esc(text)}</p>'
        f'<p><a href="{esc(back)}">back</a></p></section></main>',
    )
