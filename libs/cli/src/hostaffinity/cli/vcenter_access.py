"""What a command logs in to vCenter through: within seconds, and every way that fails said in
one line naming the vCenter (`CommandFailed`, connections.py).

pyVmomi's SmartConnect first asks the server which API versions it speaks, over a connection
that has no timeout (pyVim/connect.py `__GetElementTree`, pyvmomi 9.1.1), so a vCenter that
accepts connections and never answers (a hung vCenter, a proxy in the way) would hold the
command for ever. The address is therefore asked the same question first, within
`VCENTER_ANSWER_SECONDS`, and only then logged in to.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from pyVim.connect import Disconnect
from pyVmomi import vim

from hostaffinity.cli.connections import CommandFailed
from hostaffinity.runtime.vcenter.session import (
    VCenterError,
    VCenterLoginError,
    VCenterSettings,
    connect,
    where,
)
from hostaffinity.runtime.vcenter.trust import ssl_context

VCENTER_ANSWER_SECONDS: Final = 5.0
# What SmartConnect asks first (its version negotiation); any vCenter and vcsim serve it.
VERSIONS_PATH: Final = "/sdk/vimServiceVersions.xml"
FIX_LOGIN: Final = "check the user and password given with --vcenter"


def _reason(error: OSError) -> str:
    """`Connection refused`, `Name or service not known`: the system's words, no errno."""
    return error.strerror or (os.strerror(error.errno) if error.errno else str(error))


def _ask_versions(settings: VCenterSettings, fix: str) -> None:
    """GET the versions document within VCENTER_ANSWER_SECONDS, or CommandFailed with `fix`.

    A certificate the settings do not trust is left to the login, which says whose and which
    setting to change (runtime/vcenter/trust.py)."""
    address, seconds = where(settings), VCENTER_ANSWER_SECONDS
    connection = (
        http.client.HTTPSConnection(
            settings.host, settings.port, timeout=seconds, context=ssl_context(settings)
        )
        if settings.protocol == "https"
        else http.client.HTTPConnection(settings.host, settings.port, timeout=seconds)
    )
    try:
        try:
            connection.connect()
        except TimeoutError:
            raise CommandFailed(
                f"vCenter at {address} did not complete a connection within {seconds:g} s", fix
            ) from None
        try:
            connection.request("GET", VERSIONS_PATH)
            connection.getresponse().read()
        except TimeoutError:
            raise CommandFailed(
                f"vCenter at {address} accepted the connection but did not answer within "
                f"{seconds:g} s",
                fix,
            ) from None
    except ssl.SSLError:
        return
    except OSError as error:
        raise CommandFailed(f"cannot reach vCenter at {address} ({_reason(error)})", fix) from None
    except http.client.HTTPException as error:
        raise CommandFailed(
            f"vCenter at {address} did not answer as a vCenter does ({type(error).__name__})", fix
        ) from None
    finally:
        connection.close()


def login(settings: VCenterSettings, fix: str, login_fix: str = FIX_LOGIN) -> vim.ServiceInstance:
    """Blocking: a logged-in service instance (the caller logs out), or CommandFailed saying
    what kept the command out, with `fix` (or, for refused credentials, `login_fix`)."""
    _ask_versions(settings, fix)
    try:
        return connect(settings)
    except VCenterLoginError as refused:
        raise CommandFailed(str(refused).rstrip("."), login_fix) from None
    except VCenterError as error:
        raise CommandFailed(str(error), fix) from None
    except (OSError, http.client.HTTPException) as error:
        said = _reason(error) if isinstance(error, OSError) else type(error).__name__
        raise CommandFailed(
            f"vCenter at {where(settings)} broke off the login ({said})", fix
        ) from None


@asynccontextmanager
async def open_vcenter(
    settings: VCenterSettings, fix: str, login_fix: str = FIX_LOGIN
) -> AsyncIterator[vim.ServiceInstance]:
    """`login` in a thread; logged out again (in a thread) when the block ends."""
    service_instance = await asyncio.to_thread(login, settings, fix, login_fix)
    try:
        yield service_instance
    finally:
        await asyncio.to_thread(Disconnect, service_instance)
