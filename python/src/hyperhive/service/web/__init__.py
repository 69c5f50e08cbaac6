"""The web view (issue 18; docs/web.md): the agent and its sub-agents, live, in a browser, served by the
service itself on 127.0.0.1 when `HIVE_WEB_PORT` is set.

    app.py      the ASGI app and its server (the service's own HTTP server), pages and forms
    gate.py     from a request's head: Host, Origin, the route, the session cookie
    auth.py     one-time login codes, signed session cookies, CSRF tokens
    files.py    its secret (`web-token`) and address (`web.json`) in the state directory
    source.py   what it reads from the service's objects, and the panels drawn from it, shared by pages
    panels.py   the panels as HTML (pure)
    lines.py    turns and their stream lines as HTML, as `tail` renders them, and the hive's lines (pure)
    hive.py     the Hive panel: this agent, the host's other agents and links to their pages, its messages (pure)
    stream.py   Server-Sent Events from the live feed, resumed by Last-Event-ID
    actions.py  send, cancel a turn, kill a task, cancel a sub-agent or a reminder
    page.py     the documents: the main page, history, login, errors
    static/     live.js (the stream), login.js (the link's code), style.css
"""
