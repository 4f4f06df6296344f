"""Everything that touches CuPy: kernel loading, launch and kernel selection.

Importing this package imports no CuPy; the modules that launch kernels import
it when first called.
"""
