"""``kvplan`` entry point: the typer app and the one place errors become exit status 2.

Every ``KvplanError`` and every command-line usage error prints one line on stderr and exits
with status 2; a traceback is shown only with ``KVPLAN_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.exceptions import TyperException  # typer 0.28 vendors click: its errors derive from this

from ..core.errors import KvplanError
from . import (
    calibrate_cmd,
    curve_cmd,
    fit_cmd,
    formats_cmd,
    gpus_cmd,
    models_cmd,
    plan_cmd,
    size_cmd,
    sweep_cmd,
)

app = typer.Typer(
    name="kvplan",
    help="Exact KV-cache capacity planning for LLM serving.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("size", epilog=size_cmd.EXAMPLES)(size_cmd.size)
app.command("models")(models_cmd.models)
app.command("formats")(formats_cmd.formats)
app.command("gpus")(gpus_cmd.gpus)
app.command("fit", epilog=fit_cmd.EXAMPLES)(fit_cmd.fit)
app.command("curve", epilog=curve_cmd.EXAMPLES)(curve_cmd.curve)
app.command("sweep", epilog=sweep_cmd.EXAMPLES)(sweep_cmd.sweep)
app.command("plan", epilog=plan_cmd.EXAMPLES)(plan_cmd.plan)
app.command("init")(plan_cmd.init)
app.command("validate")(calibrate_cmd.validate)
app.command("calibrate")(calibrate_cmd.calibrate)


def _fail(message: str) -> int:
    from ..core.text import printable

    for line in message.splitlines() or [""]:  # a scenario reports every problem, one per line
        sys.stderr.write(f"kvplan: error: {printable(line)}\n")
    return 2


def _traceback() -> None:
    """The current traceback on stderr, with every Hub token replaced by ***."""
    import traceback

    text = traceback.format_exc()
    hub = sys.modules.get("kvplan.loaders.hub")
    for secret in (hub.secrets() if hub else set()) | {os.environ.get("HF_TOKEN") or ""}:
        if secret:
            text = text.replace(secret, "***")
    sys.stderr.write(text)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit status (used by ``main`` and the tests)."""
    try:
        result = app(args=argv, prog_name="kvplan", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except KvplanError as e:
        if os.environ.get("KVPLAN_DEBUG") == "1":
            _traceback()
        return _fail(str(e))
    except TyperException as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help())
            return 0
        return _fail(e.format_message().replace("\n", " "))
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        return _fail("aborted")
    except MemoryError:
        return _fail("out of memory: the input asks for more than this machine holds; narrow it")
    except OSError as e:
        if e.filename is None:
            raise
        # a path the user gave that the system refuses (a name over 255 bytes, a loop of links,
        # ...), wherever it is first touched: one line naming it
        name = str(e.filename)
        return _fail(f"{name[:80] + '...' if len(name) > 80 else name}: {e.strerror}")


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
