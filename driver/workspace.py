"""A thread's /workspace checkpoint, fetched from control by a driver that was assigned a
run (the warm pool and the cold start deliver everything over the control connection).

The archive is extracted by `tar` as the sandbox user, as the worker's own restore does
(`put_archive`): `--no-same-owner`, and directories restored last so a read-only one from
the archive cannot stop its own contents. Nothing outside /workspace can be written: the
process has no right to, and tar refuses absolute names and `..` by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from driver.forwarder import upstream_for

log = logging.getLogger("driver.workspace")

WORKSPACE_PATH = "/driver/workspace"
_CONNECT_TIMEOUT, _READ_TIMEOUT = 30.0, 300.0
_STDERR_KEEP = 2000


class RestoreFailed(Exception):
    """The checkpoint could not be fetched or extracted; the run cannot start."""


async def restore_workspace(control_url: str, grant: str, workspace: str) -> int:
    """Stream the run's thread checkpoint from control into `workspace`. Returns the bytes
    extracted; 0 when control has none (a thread's first run)."""
    import httpx  # only for a run with a checkpoint: a cold driver's start does without it

    base_url, unix_path = upstream_for(control_url)
    transport = httpx.AsyncHTTPTransport(uds=unix_path) if unix_path else None
    async with (
        httpx.AsyncClient(
            base_url=base_url,
            transport=transport,
            timeout=httpx.Timeout(_CONNECT_TIMEOUT, read=_READ_TIMEOUT),
            trust_env=False,
        ) as client,
        client.stream(
            "GET", WORKSPACE_PATH, headers={"Authorization": f"Bearer {grant}"}
        ) as response,
    ):
        if response.status_code == 204:
            return 0
        if response.status_code != 200:
            body = (await response.aread())[:300].decode("utf-8", "replace")
            raise RestoreFailed(f"control answered {response.status_code}: {body}")
        return await _extract(response.aiter_bytes(), workspace)


async def _extract(chunks: AsyncIterator[bytes], workspace: str) -> int:
    import httpx  # imported by restore_workspace already; named here for its error type

    process = await asyncio.create_subprocess_exec(
        "tar",
        "-C",
        workspace,
        "-xf",
        "-",
        "--no-same-owner",
        "--delay-directory-restore",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stderr is not None
    # Read while we write: a tar that complains a lot must not block on a full pipe.
    errors = asyncio.ensure_future(process.stderr.read())
    written = 0
    try:
        async for chunk in chunks:
            process.stdin.write(chunk)
            await process.stdin.drain()
            written += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass  # tar stopped reading: its exit code says why
    except httpx.HTTPError as error:
        process.kill()
        await process.wait()
        errors.cancel()
        raise RestoreFailed(f"the checkpoint stream broke: {error}") from error
    finally:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            process.stdin.close()
    code = await process.wait()
    complaint = await errors  # at its end once tar has exited
    if code != 0:
        message = complaint.decode("utf-8", "replace").strip()[:_STDERR_KEEP]
        raise RestoreFailed(f"tar exited with {code}: {message}")
    log.info("workspace_restored", extra={"bytes": written})
    return written
