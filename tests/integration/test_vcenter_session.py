"""VCenterSession against vcsim: it outlives the end of its vCenter session, and fails fast and
clearly on bad credentials instead of retrying for ever."""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from itertools import pairwise

import msgspec
import pytest
from pyVmomi import vim

from hostaffinity.runtime.vcenter.session import (
    VCenterLoginError,
    VCenterSession,
    VCenterUnreachable,
    connect,
)
from hostaffinity.runtime.vcenter.settings import VCenterSettings
from tests.platform.tcp_proxy import SlowRequests, TcpProxy
from tests.platform.unusable_access import silent_listener
from tests.platform.vcsim import Vcsim, VcsimFactory


def session_manager(si: vim.ServiceInstance) -> vim.SessionManager:
    manager = si.RetrieveContent().sessionManager
    assert manager is not None
    return manager


def active_sessions(admin: vim.ServiceInstance) -> set[str]:
    return {s.key for s in session_manager(admin).sessionList}


async def session_key(session: VCenterSession) -> str:
    """The key of the vCenter session the VCenterSession holds now."""

    def key() -> str:
        current = session_manager(session.service_instance).currentSession
        assert current is not None
        return current.key

    return await session.call(key)


@pytest.fixture
def vc(vcsim: VcsimFactory) -> Vcsim:
    return vcsim(hosts=2, vms=2)


@pytest.fixture
async def session(vc: Vcsim) -> AsyncIterator[VCenterSession]:
    async with VCenterSession(vc.settings()) as opened:
        yield opened


def find_vm(si: vim.ServiceInstance, name: str) -> vim.VirtualMachine:
    content = si.RetrieveContent()
    assert content.viewManager is not None
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    return next(vm for vm in view.view if isinstance(vm, vim.VirtualMachine) and vm.name == name)


def terminate_from_admin(vc: Vcsim, session: VCenterSession, key: str) -> None:
    """An administrator ends our session from their own connection."""
    session_manager(vc.connect()).TerminateSession([key])


def log_out_under_it(vc: Vcsim, session: VCenterSession, key: str) -> None:
    """Something logs out on the session's own stub, as an idle timeout would end it."""
    session_manager(session.service_instance).Logout()


@pytest.mark.parametrize(
    "end_session",
    [
        pytest.param(terminate_from_admin, id="terminated-by-admin"),
        pytest.param(log_out_under_it, id="logged-out"),
    ],
)
async def test_a_call_after_the_session_ended_logs_in_again_and_succeeds(
    vc: Vcsim,
    session: VCenterSession,
    end_session: Callable[[Vcsim, VCenterSession, str], None],
) -> None:
    vm = await session.call(find_vm, session.service_instance, "node-1")
    old_key = await session_key(session)
    await asyncio.to_thread(end_session, vc, session, old_key)
    assert old_key not in await asyncio.to_thread(active_sessions, vc.connect())
    assert session.relogins == 0

    # A managed object fetched in the old session still works: the stub is the same.
    name = await session.call(lambda: vm.name)

    assert name == "node-1"
    assert session.relogins == 1
    new_key = await session_key(session)
    assert new_key != old_key
    assert new_key in await asyncio.to_thread(active_sessions, vc.connect())


async def test_keepalive_notices_the_ended_session_without_any_call(vc: Vcsim) -> None:
    async with VCenterSession(vc.settings(keepalive_seconds=0.1)) as session:
        key = await session_key(session)
        await asyncio.to_thread(terminate_from_admin, vc, session, key)

        for _ in range(100):  # the keep-alive runs every 0.1 s; allow 5 s
            if session.relogins:
                break
            await asyncio.sleep(0.05)

        assert session.relogins == 1
        assert await session_key(session) != key


async def test_a_call_that_fails_again_after_the_relogin_is_not_retried(
    session: VCenterSession,
) -> None:
    attempts = 0

    def ends_its_own_session() -> None:
        nonlocal attempts
        attempts += 1
        session_manager(session.service_instance).Logout()
        session.service_instance.CurrentTime()

    with pytest.raises(vim.fault.NotAuthenticated):
        await session.call(ends_its_own_session)

    assert attempts == 2
    assert session.relogins == 1


async def test_a_not_authenticated_fault_on_a_live_session_is_retried_without_login(
    session: VCenterSession,
) -> None:
    attempts = 0

    def fails_once() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise vim.fault.NotAuthenticated()
        return "done"

    assert await session.call(fails_once) == "done"
    assert session.relogins == 0


async def test_a_wrong_password_is_a_clear_error_not_a_retry(vc: Vcsim) -> None:
    session = VCenterSession(vc.settings(password="wrong"))
    started = time.monotonic()

    with pytest.raises(VCenterLoginError, match=r"refused the login of 'user': Login failure"):
        await session.start()

    assert time.monotonic() - started < 5
    assert "wrong" not in repr(session.settings)
    await session.close()


async def test_calls_run_one_at_a_time_on_one_thread(session: VCenterSession) -> None:
    spans: list[tuple[float, float, int]] = []

    def work() -> None:
        begin = time.monotonic()
        time.sleep(0.02)
        spans.append((begin, time.monotonic(), threading.get_ident()))

    await asyncio.gather(*(session.call(work) for _ in range(5)))

    spans.sort()
    assert len({thread for _, _, thread in spans}) == 1
    assert threading.get_ident() not in {thread for _, _, thread in spans}
    assert all(end <= next_begin for (_, end, _), (next_begin, _, _) in pairwise(spans))


async def test_close_logs_out(vc: Vcsim) -> None:
    session = VCenterSession(vc.settings())
    await session.start()
    key = await session_key(session)
    assert (await session.current_time()).year >= 2024

    await session.close()

    assert key not in await asyncio.to_thread(active_sessions, vc.connect())


async def test_close_logs_out_a_login_whose_caller_was_cancelled(vc: Vcsim) -> None:
    """A service stopped while it logs in: the login goes on on the session's thread, and the
    session it makes must be logged out too, not left in vCenter until its idle timeout."""
    admin = vc.connect()
    before = await asyncio.to_thread(active_sessions, admin)
    proxy = SlowRequests(vc.host, vc.port, latency=0.2)
    await proxy.start()
    try:
        began = time.monotonic()
        async with VCenterSession(vc.settings(port=proxy.port)):
            login_seconds = time.monotonic() - began
        session = VCenterSession(vc.settings(port=proxy.port))
        starting = asyncio.create_task(session.start())
        await asyncio.sleep(0.3)  # the login's first request is on its way
        assert not starting.done()
        starting.cancel()
        await session.close()
        assert session.connected() is False
        # Long enough for a login left running to have ended logged in.
        await asyncio.sleep(login_seconds)
        assert await asyncio.to_thread(active_sessions, admin) == before
    finally:
        await proxy.stop()


def test_connect_logs_in_once_or_names_the_refusal(vc: Vcsim) -> None:
    """The blocking login VCenterSession and one-shot commands (the CLI seed) use."""
    si = connect(vc.settings())
    current = session_manager(si).currentSession
    assert current is not None
    assert current.userName == "user"
    session_manager(si).Logout()

    with pytest.raises(VCenterLoginError, match=r"vCenter http://127\.0\.0\.1:\d+ refused"):
        connect(vc.settings(password="wrong"))


async def test_reconnect_logs_the_old_session_out_and_keeps_working(vc: Vcsim) -> None:
    async with VCenterSession(vc.settings()) as session:
        keys = [await session_key(session)]
        for _ in range(3):
            await session.reconnect()
            keys.append(await session_key(session))

        active = await asyncio.to_thread(active_sessions, vc.connect())
        assert len(set(keys)) == 4
        assert active & set(keys) == {keys[-1]}
        assert session.reconnects == 3
        assert (await session.current_time()).year >= 2024


async def test_a_logout_vcenter_did_not_answer_is_repeated_after_the_next_login(
    vc: Vcsim,
) -> None:
    """A network failure during a reconnect must not leave the old session on vCenter."""
    admin = vc.connect()
    proxy = TcpProxy(vc.host, vc.port)
    await proxy.start()
    try:
        async with VCenterSession(vc.settings(port=proxy.port)) as session:
            old_key = await session_key(session)
            await proxy.refuse()
            with pytest.raises(ConnectionError, match="Connection refused"):
                await session.reconnect()  # neither the logout nor the login got through
            assert old_key in await asyncio.to_thread(active_sessions, admin)

            await proxy.accept()
            await session.reconnect()

            remaining = await asyncio.to_thread(active_sessions, admin)
            assert old_key not in remaining
            assert await session_key(session) in remaining
    finally:
        await proxy.stop()


def test_a_vcenter_that_never_answers_is_given_up_in_bounded_time() -> None:
    """pyVmomi's first request has no timeout of its own: without the runtime's bound a service
    logging in to a hung vCenter waited in its session thread for ever, never retrying."""
    settings = VCenterSettings(
        name="hung", host="127.0.0.1", username="u", password="p", protocol="http",
        http_timeout_seconds=0.5,
    )  # fmt: skip
    with silent_listener() as port:
        started = time.monotonic()
        with pytest.raises(VCenterUnreachable, match=r"did not answer within 0\.5 s"):
            connect(msgspec.structs.replace(settings, port=port))
        assert time.monotonic() - started < 5
