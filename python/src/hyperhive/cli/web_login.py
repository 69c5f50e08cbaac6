"""`hyperhive web-login`: a one-time link that logs one browser into the web view (docs/web.md).

It asks the running service for a code (control op `web_login`: the codes live in the service's memory,
each good once, for five minutes) and prints the link that carries it in its fragment, which a browser
never sends, so it is in no request line and no proxy's log. `--url` puts another address in front of it:
the tunnel's or the reverse proxy's, as the operator's browser reaches the view.
"""

from __future__ import annotations

import click

from hyperhive.cli.operator import ask_service
from hyperhive.cli.which_agent import operator_config


@click.command("web-login")
@click.option(
    "--url",
    "base",
    metavar="URL",
    help="The address the browser reaches the view at (a tunnel's or a proxy's), e.g. https://agent.example.com",
)
def web_login(base: str | None) -> None:
    """Print a one-time link that logs a browser into the web view."""
    config = operator_config()
    answer = ask_service(config, "web_login", "the web view is served by the running service")
    code, url = str(answer["code"]), str(answer["url"])
    if base is not None:
        url = f"{base.rstrip('/')}/login#code={code}"
    minutes = round(float(answer.get("expires_in", 300)) / 60)
    click.echo(f"Open this link within {minutes} minutes; it logs in one browser, once:\n\n  {url}\n")
    click.echo(f"Or open {url.partition('#')[0]} and paste the code: {code}")
