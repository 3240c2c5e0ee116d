"""vCenter: how to reach each (settings), the session (login, keep-alive, re-login) and the checks
of its certificate."""
