"""A vCenter login that lasts: keep-alive, re-login on expiry, and an async face for pyVmomi.

pyVmomi blocks, so every call runs on the session's own single thread: calls on one connection
never interleave and the event loop never waits on the network. A session that vCenter ended (idle
timeout, a vCenter restart, an administrator terminating it) shows up as
`vim.fault.NotAuthenticated`; the session then logs in again *on the same SOAP stub*, so every
managed object reference a caller holds stays valid, and repeats the call once. Objects that live
in a session (property collectors, filters, container views) die with it: a caller that keeps
them, such as a `WaitForUpdatesEx` loop, rebuilds them when `relogins` has moved.

A caller that gives up on a session for any other reason (a network error, a fault it cannot
place) calls `reconnect`, which logs the old session out before logging in again: vCenter limits
the sessions it keeps, and one left behind lives until its idle timeout. When vCenter does not
answer that logout, it is repeated after the next successful login.

A caller whose calls block for long, such as a `WaitForUpdatesEx` long poll, owns a session of its
own and keeps each call shorter than the keep-alive period: calls queue on the one thread, so a
keep-alive waits at most one poll.

pyVmomi 9 ships type stubs for the API (`vim.*`); `pyVim.connect.SmartConnect` has none.
"""

import asyncio
import datetime
import http.client
import logging
import os
import ssl
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, ParamSpec, Self, TypeVar

from pyVim.connect import SmartConnect
from pyVmomi import vim

from hostaffinity.runtime.vcenter.settings import VCenterSettings
from hostaffinity.runtime.vcenter.trust import (
    ThumbprintMismatch,
    ssl_context,
    untrusted,
)

_log = logging.getLogger(__name__)

# Old sessions remembered for a later logout when vCenter did not answer the first one.
UNANSWERED_LOGOUTS = 16

P = ParamSpec("P")
T = TypeVar("T")


class VCenterError(Exception):
    """vCenter could not be used; the message says which vCenter and why."""


class VCenterLoginError(VCenterError):
    """vCenter refused the credentials: retrying with the same ones cannot help."""


class VCenterUnreachable(VCenterError, ConnectionError):
    """vCenter's address did not answer as a vCenter does, within the time given (a
    ConnectionError, so what retries on a network failure retries on it too)."""


# What SmartConnect asks first (its version negotiation); any vCenter and vcsim serve it.
VERSIONS_PATH: Final = "/sdk/vimServiceVersions.xml"


def ask_versions(settings: VCenterSettings, seconds: float) -> None:
    """GET the versions document within `seconds`, or `VCenterUnreachable` saying how it failed.

    pyVmomi's SmartConnect asks this first over a connection with no timeout (pyVim/connect.py
    `__GetElementTree`, pyvmomi 9.1.1): a vCenter that accepts connections and never answers (a
    hung vCenter, a proxy in the way) would hold the caller for ever. A certificate the settings
    do not trust is left to the login, which says whose and which setting to change."""
    address = where(settings)
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
            raise VCenterUnreachable(
                f"vCenter at {address} did not complete a connection within {seconds:g} s"
            ) from None
        try:
            connection.request("GET", VERSIONS_PATH)
            connection.getresponse().read()
        except TimeoutError:
            raise VCenterUnreachable(
                f"vCenter at {address} accepted the connection but did not answer within "
                f"{seconds:g} s"
            ) from None
    except ssl.SSLError:
        return
    except OSError as error:
        raise VCenterUnreachable(f"cannot reach vCenter at {address} ({_reason(error)})") from None
    except http.client.HTTPException as error:
        raise VCenterUnreachable(
            f"vCenter at {address} did not answer as a vCenter does ({type(error).__name__})"
        ) from None
    finally:
        connection.close()


def _reason(error: OSError) -> str:
    """`Connection refused`, `Name or service not known`: the system's words, no errno."""
    return error.strerror or (os.strerror(error.errno) if error.errno else str(error))


def connect(
    settings: VCenterSettings, *, answer_within: float | None = None
) -> vim.ServiceInstance:
    """Log in once and return the pyVmomi service instance; blocking, with no keep-alive.

    What `VCenterSession` logs in with, and enough for a one-shot command (the caller logs out);
    a service uses a `VCenterSession`. vCenter is first asked whether it answers at all, within
    `answer_within` (default: the settings' `http_timeout_seconds`): `VCenterUnreachable`.
    Rejected credentials raise `VCenterLoginError`, an untrusted certificate `VCenterTrustError`
    (trust.py).
    """
    ask_versions(settings, answer_within or settings.http_timeout_seconds)
    try:
        # SmartConnect is unannotated; it returns a vim.ServiceInstance.
        si: vim.ServiceInstance = SmartConnect(  # type: ignore[no-untyped-call]
            protocol=settings.protocol,
            host=settings.host,
            port=settings.port,
            user=settings.username,
            pwd=settings.password,
            sslContext=ssl_context(settings),
            httpConnectionTimeout=settings.http_timeout_seconds,
        )
    except vim.fault.InvalidLogin as err:
        raise _login_error(settings, err) from err
    except (ssl.SSLCertVerificationError, ThumbprintMismatch) as err:
        raise untrusted(settings, err) from err
    _log.info("logged in to vCenter %s as %s", where(settings), settings.username)
    return si


def _login_error(settings: VCenterSettings, err: vim.fault.InvalidLogin) -> VCenterLoginError:
    """Says which vCenter refused which user, and vCenter's reason, so an operator can act."""
    message = getattr(err, "msg", "") or type(err).__name__
    return VCenterLoginError(
        f"vCenter {where(settings)} refused the login of {settings.username!r}: {message}"
    )


def where(settings: VCenterSettings) -> str:
    """The vCenter's address, for messages."""
    return f"{settings.protocol}://{settings.host}:{settings.port}"


class VCenterSession:
    """One logged-in connection to a vCenter, kept alive and logged in again when it expires.

    Use it as `async with VCenterSession(settings) as session:` and run every blocking pyVmomi
    call through `await session.call(fn, *args)`. Reading data objects already fetched (such as
    `session.content.about`) does not block; calling a managed object's method or reading its
    properties does, and belongs in `call`.
    """

    def __init__(self, settings: VCenterSettings) -> None:
        self.settings = settings
        # How often vCenter ended our session and we logged in again (for metrics and for callers
        # whose session-scoped objects must be rebuilt).
        self.relogins = 0
        # How often the caller gave the session up and a new one was logged in (`reconnect`).
        self.reconnects = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vcenter")
        self._service_instance: vim.ServiceInstance | None = None
        self._content: vim.ServiceInstanceContent | None = None
        self._keepalive: asyncio.Task[None] | None = None
        # Old sessions whose logout vCenter did not answer (a network failure): each is logged
        # out after the next login. Bounded: older ones end at vCenter's idle timeout.
        self._unanswered: deque[vim.SessionManager] = deque(maxlen=UNANSWERED_LOGOUTS)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def service_instance(self) -> vim.ServiceInstance:
        """The pyVmomi service instance, bound to the one SOAP stub the session keeps."""
        if self._service_instance is None:
            raise VCenterError(f"vCenter session to {self._where()} is not started")
        return self._service_instance

    @property
    def content(self) -> vim.ServiceInstanceContent:
        """The `vim.ServiceInstanceContent`, fetched once at login; its managers stay valid."""
        if self._content is None:
            raise VCenterError(f"vCenter session to {self._where()} is not started")
        return self._content

    async def start(self) -> None:
        """Log in, and keep the session alive in the background until `close`."""
        await self._in_session_thread(self._connect)
        self._keep_alive_from_now()

    def connected(self) -> bool:
        """Logged in: a readiness part (a later fault is repaired by the session itself)."""
        return self._service_instance is not None

    async def start_when_reachable(
        self, *, retry_seconds: float = 1.0, max_retry_seconds: float = 30.0
    ) -> None:
        """`start`, retried with a growing delay until vCenter answers: a service started while
        vCenter is down or restarting waits, not ready, instead of exiting and being restarted
        in a loop. Refused credentials are retried too (a Secret may be fixed meanwhile), and
        said so each time."""
        attempt, delay = self.start, retry_seconds
        while True:
            try:
                await attempt()
                return
            except Exception as error:
                _log.warning(
                    "cannot log in to vCenter at %s (%s); retrying in %.1f s",
                    self._where(),
                    str(error) or type(error).__name__,
                    delay,
                )
            await asyncio.sleep(delay)
            attempt, delay = self.reconnect, min(delay * 2, max_retry_seconds)

    async def close(self) -> None:
        """Stop the keep-alive and log out; a failed logout is only logged.

        The logout is decided on the session's thread, behind whatever runs there: a login
        whose caller was cancelled (a service stopped while it logged in) still ends logged in,
        and that session is logged out too instead of living on in vCenter until its idle
        timeout."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
            self._keepalive = None
        await self._in_session_thread(self._logout_if_logged_in)
        self._executor.shutdown(wait=False)

    async def reconnect(self) -> None:
        """Log the current session out (where vCenter still answers) and log in afresh.

        Also the way to retry a `start` that failed. Session-scoped objects must be rebuilt.
        """
        await self._in_session_thread(self._reconnect)
        self._keep_alive_from_now()

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args, **kwargs)` on the session's thread. If vCenter says the session is gone,
        log in again and run it once more; a second failure is the caller's."""

        def attempt() -> T:
            try:
                return fn(*args, **kwargs)
            except vim.fault.NotAuthenticated:
                self._relogin()
            return fn(*args, **kwargs)

        return await self._in_session_thread(attempt)

    async def current_time(self) -> datetime.datetime:
        """vCenter's clock (a `datetime`): the cheapest call that needs a live session."""
        return await self.call(self.service_instance.CurrentTime)

    async def _in_session_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _keep_alive_from_now(self) -> None:
        if self._keepalive is None:
            self._keepalive = asyncio.create_task(self._keep_alive(), name="vcenter-keepalive")

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.settings.keepalive_seconds)
            try:
                await self.current_time()
            except VCenterLoginError as err:
                _log.error("vCenter keep-alive: %s", err)
            except Exception as err:  # a network failure must not end the keep-alive
                _log.warning("vCenter keep-alive to %s failed: %r", self._where(), err)

    # The methods below run on the session's thread only.

    def _connect(self) -> None:
        self._log_out_unanswered()  # first, so old and new sessions never coexist
        si = connect(self.settings)
        self._service_instance = si
        self._content = si.RetrieveContent()

    def _reconnect(self) -> None:
        if self._service_instance is not None:
            self._logout()
        self._connect()
        self.reconnects += 1

    def _relogin(self) -> None:
        manager = self._session_manager()
        try:  # readable without a session: None then
            alive = manager.currentSession is not None
        except vim.fault.NotAuthenticated:
            alive = False
        if alive:  # the fault was not about our session; Login would fail, a retry may not
            return
        _log.warning("vCenter session to %s ended; logging in again", self._where())
        try:
            manager.Login(self.settings.username, self.settings.password, None)
        except vim.fault.InvalidLogin as err:
            raise _login_error(self.settings, err) from err
        self.relogins += 1

    def _logout_if_logged_in(self) -> None:
        if self._service_instance is not None:
            self._logout()

    def _logout(self) -> None:
        manager = self._session_manager()
        if not self._log_out(manager):
            self._unanswered.append(manager)  # logged out once vCenter answers again
        self._service_instance = None
        self._content = None

    def _log_out(self, manager: vim.SessionManager) -> bool:
        """Log the session of `manager`'s connection out; False when vCenter did not answer, so
        the session may live on there."""
        try:
            manager.Logout()
        except (OSError, http.client.HTTPException) as err:
            _log.info("vCenter %s did not answer a logout: %r", self._where(), err)
            return False
        except Exception as err:  # the session is already gone; nothing to undo
            _log.info("vCenter logout from %s: %r", self._where(), err)
        finally:
            manager._stub.DropConnections()  # close the pooled sockets now
        return True

    def _log_out_unanswered(self) -> None:
        """Sessions whose logout vCenter did not answer: try again (before a new login)."""
        for manager in list(self._unanswered):
            if self._log_out(manager):
                self._unanswered.remove(manager)

    def _session_manager(self) -> vim.SessionManager:
        manager = self.content.sessionManager
        if manager is None:  # optional in pyVmomi's types; vCenter always has one
            raise VCenterError(f"{self._where()} has no session manager")
        return manager

    def _where(self) -> str:
        return where(self.settings)
