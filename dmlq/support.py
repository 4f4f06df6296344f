"""Old name of :mod:`dmlq.validation` (descriptor validation), kept so that
``from dmlq import support`` and ``from dmlq.support import validate`` still work."""
from .validation import *  # noqa: F401,F403
from .validation import (DEFAULT_FEATURE_LEVEL, FEATURE_LEVELS, SUPPORT, TensorSupport,  # noqa: F401
                         check_data_type, parse_feature_level, support_table, validate)
