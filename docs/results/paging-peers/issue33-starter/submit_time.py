"""How long page_in_async / page_out_async hold the caller for a 1 GiB buffer (median of N)."""
import statistics, sys, time
import oversub
n = int(sys.argv[1]) if len(sys.argv) > 1 else 15
checks = sys.argv[2] != "off" if len(sys.argv) > 2 else True
with oversub.Pool(capacity="1100MiB", store="/var/tmp", store_capacity="1200MiB", verify_checksums=checks) as pool:
    b = pool.address_space().alloc("1GiB")
    b.numpy()[:] = 7
    ins, outs = [], []
    for _ in range(n):
        t = time.perf_counter(); f = b.page_out_async(); outs.append(time.perf_counter() - t); f.result()
        t = time.perf_counter(); f = b.page_in_async(); ins.append(time.perf_counter() - t); f.result()
    print(f"checksums={checks} page_in_async median {statistics.median(ins)*1e3:.3f} ms (min {min(ins)*1e3:.3f}, max {max(ins)*1e3:.3f}); page_out_async median {statistics.median(outs)*1e3:.3f} ms")
