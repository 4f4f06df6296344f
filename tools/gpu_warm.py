"""Compile every kernel source for the GPU at hand, all at once (one process per source), so
CuPy's on-disk kernel cache holds them before the stage's tests start: one pytest process
would otherwise compile them one after another (NVRTC on this repo's sources takes minutes
of CPU: quant_types.cu alone 194 s on the 2 shared cores of the CI machine), and every
compute-sanitizer run is a fresh process. Prints one line per source with its seconds;
exits 0 even where a source fails (the tests then report it)."""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed


def _compile(source: str):
    import cupy

    from dmlq.gpu import loader

    t = time.monotonic()
    try:
        loader.function(source, loader.registry()[source][0])
        return source, time.monotonic() - t, ""
    except Exception as e:  # noqa: BLE001 - reported, the tests will fail on it
        return source, time.monotonic() - t, f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        cupy.cuda.runtime.deviceSynchronize()


def main() -> int:
    import cupy

    from dmlq.gpu import loader

    cc = int(cupy.cuda.Device(0).compute_capability)
    sources = loader.sources_for(cc)
    start = time.monotonic()
    print(f"compiling {len(sources)} sources for sm_{cc} into {os.environ.get('CUPY_CACHE_DIR', '~/.cupy/kernel_cache')}",
          flush=True)
    bad = 0
    import multiprocessing

    with ProcessPoolExecutor(max_workers=min(len(sources), os.cpu_count() or 1),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(_compile, s) for s in sources]):
            source, seconds, error = fut.result()
            bad += bool(error)
            print(f"  {source}: {seconds:.1f} s{'  ERROR ' + error if error else ''}", flush=True)
    print(f"warm: {len(sources) - bad} of {len(sources)} sources compiled in {time.monotonic() - start:.1f} s wall",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
