"""The one exception family users see as a single line (no traceback).

Raise a subclass with a message that names what is wrong and says what to
do; ``app.main`` prints it as ``cifar_dist: error: <message>`` and exits 2.
"""


class CifarDistError(Exception):
    """A problem the user can fix; the message is one line that says how."""
