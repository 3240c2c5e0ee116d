"""What a command logs in to vCenter through: within seconds, and every way that fails said in
one line naming the vCenter (`CommandFailed`, connections.py).

The runtime's `connect` asks vCenter whether it answers at all before pyVmomi logs in (a hung
vCenter would otherwise hold a caller for ever: session.py `ask_versions`); a command gives it
`VCENTER_ANSWER_SECONDS`.
"""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

from pyVim.connect import Disconnect
from pyVmomi import vim

from hostaffinity.cli.connections import CommandFailed
from hostaffinity.runtime.vcenter.session import VCenterError, VCenterLoginError, connect, where
from hostaffinity.runtime.vcenter.settings import VCenterSettings

VCENTER_ANSWER_SECONDS: Final = 5.0
FIX_LOGIN: Final = "check the user and password given with --vcenter"


def login(settings: VCenterSettings, fix: str, login_fix: str = FIX_LOGIN) -> vim.ServiceInstance:
    """Blocking: a logged-in service instance (the caller logs out), or CommandFailed saying
    what kept the command out, with `fix` (or, for refused credentials, `login_fix`)."""
    try:
        return connect(settings, answer_within=VCENTER_ANSWER_SECONDS)
    except VCenterLoginError as refused:
        raise CommandFailed(str(refused).rstrip("."), login_fix) from None
    except VCenterError as error:
        raise CommandFailed(str(error), fix) from None
    except (OSError, http.client.HTTPException) as error:
        said = (
            (error.strerror or str(error)) if isinstance(error, OSError) else type(error).__name__
        )
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
