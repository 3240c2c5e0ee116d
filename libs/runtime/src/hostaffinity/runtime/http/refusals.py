"""One warning line, not a traceback, for an HTTP request aiohttp could not parse.

aiohttp's server answers a request it cannot parse (an unknown method, a request line or header
over 8 KiB, broken framing) with 400 and logs it with `logger.exception`: a traceback per request,
which any client reaching a port can provoke as often as it likes (found by
tests/integration/test_http_fuzz.py). The 400 stays; the log gets one line saying what was wrong.
"""

import logging

from aiohttp.http_exceptions import HttpProcessingError

AIOHTTP_SERVER_LOGGER = "aiohttp.server"


class MalformedRequestFilter(logging.Filter):
    """Turns aiohttp's traceback for an unparsable request into a one-line warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        refused = record.exc_info[1] if record.exc_info else None
        if isinstance(refused, HttpProcessingError):
            record.msg = "refused a malformed HTTP request (%d): %s"
            record.args = (refused.code, refused.message.splitlines()[0][:200])
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_malformed_requests() -> None:
    """Install the filter on aiohttp's server logger, once per process."""
    logger = logging.getLogger(AIOHTTP_SERVER_LOGGER)
    if not any(isinstance(each, MalformedRequestFilter) for each in logger.filters):
        logger.addFilter(MalformedRequestFilter())
