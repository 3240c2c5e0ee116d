"""aiohttp's traceback for an unparsable request becomes one warning line; other errors of its
server logger keep theirs."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadHttpMethod, LineTooLong

from hostaffinity.runtime.http.refusals import AIOHTTP_SERVER_LOGGER, quiet_malformed_requests


def log_raised(error: Exception) -> None:
    try:
        raise error
    except Exception:
        logging.getLogger(AIOHTTP_SERVER_LOGGER).exception("Error handling request from 1.2.3.4")


@pytest.mark.parametrize(
    "refused",
    [BadHttpMethod("BREW"), LineTooLong("/healthz?" + "x" * 9000, "8190")],
    ids=["unknown method", "request line too long"],
)
def test_an_unparsable_request_is_one_warning_line(
    refused: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    quiet_malformed_requests()
    quiet_malformed_requests()  # idempotent: one filter, one record
    log_raised(refused)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert record.getMessage().startswith("refused a malformed HTTP request (400): ")
    assert "\n" not in record.getMessage()


def test_other_errors_keep_their_traceback(caplog: pytest.LogCaptureFixture) -> None:
    quiet_malformed_requests()
    log_raised(RuntimeError("a handler bug"))
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[0] is RuntimeError
