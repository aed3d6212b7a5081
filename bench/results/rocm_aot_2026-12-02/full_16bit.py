import sys, time, multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from engine.kernels import catalog_compile as kc   # (the compile half of the catalog, since 12-05)
if __name__ == "__main__":
    t0 = time.time()
    jobs = []
    for t in sys.argv[1].split(","):
        for i, l in enumerate(kc._launches_cached(t, "full")):
            if "float32" not in l.label:
                jobs.append((t, "full", i))
    jobs.sort(key=lambda j: (j[2], j[0]))
    bad = 0
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futs = [pool.submit(kc._compile_one, *j) for j in jobs]
        for n, f in enumerate(as_completed(futs), 1):
            r = f.result()
            if not r.ok:
                bad += 1
                print("FAIL", r.target, r.label, r.kernel.rsplit(".", 1)[-1], r.error, flush=True)
            if n % 25 == 0:
                print(f"[{n}/{len(jobs)}] {time.time()-t0:.0f}s", flush=True)
    print(f"16-bit full: {len(jobs)-bad} of {len(jobs)} compiled, {bad} failed, {time.time()-t0:.0f}s", flush=True)
