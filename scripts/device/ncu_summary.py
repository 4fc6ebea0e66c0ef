"""Per-kernel-name totals of an ncu --csv run (time, DRAM bytes read, GB/s)."""
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
idi = hdr.index("ID")
per = collections.OrderedDict()
for r in rows:
    d = per.setdefault(r[idi], {"k": r[ki][:60]})
    d[r[mi]] = float(r[vi].replace(",", ""))
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
tot_t = tot_b = 0
for d in per.values():
    t = d.get("gpu__time_duration.sum", 0) / 1e3; b = d.get("dram__bytes_read.sum", 0)
    a = agg[d["k"]]; a[0] += 1; a[1] += t; a[2] += b; tot_t += t; tot_b += b
print(f"{len(per)} kernels, {tot_t:.1f} us, {tot_b/1e9:.3f} GB read, {tot_b/tot_t/1e3 if tot_t else 0:.0f} GB/s")
for k, (n, t, b) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{n:4d} {t:9.1f} us {b/1e6:9.1f} MB {b/t/1e3 if t else 0:7.0f} GB/s  {k}")
