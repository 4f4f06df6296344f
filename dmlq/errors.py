"""The two error types of dmlq (TypeError covers wrong array types and dtypes)."""


class DescError(ValueError):
    """A descriptor or argument breaks a DirectML or dmlq rule.

    The message names the operator, the field and the rule.
    """


class UnsupportedError(NotImplementedError):
    """Valid DirectML, but not implemented on this device or backend."""
