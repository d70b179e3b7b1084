"""The errors a user can cause. The CLI prints `error: <message>` for any AotpackError and exits 1, with no
traceback, so each message must stand on its own: what went wrong, where (the user's file and line when it is
their model) and what to do about it."""


class AotpackError(Exception):
    """Base of every user-facing error."""


class ModelFileError(AotpackError):
    """model.py is missing, does not import, or does not define what aotpack needs."""


class DynamicShapeError(AotpackError):
    """A dynamic-shape declaration (model.py or --dynamic) is malformed or contradicts the example inputs."""


class CaptureError(AotpackError):
    """torch.export could not capture the model faithfully over the declared ranges."""


class UnsupportedError(AotpackError):
    """The captured graph uses something aotpack cannot lower (an op, a dtype, a data-dependent size)."""
