import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    rows = d["rows"]
    out = []
    for direction in ("write", "read"):
        ov_on = max((r for r in rows if r["engine"] == "oversub" and r["direction"] == direction and "no checksums" not in r["config"]), key=lambda r: r["gib_per_s"])
        ov_off = max((r for r in rows if r["engine"] == "oversub" and r["direction"] == direction and "no checksums" in r["config"]), key=lambda r: r["gib_per_s"])
        ds = max((r for r in rows if r["engine"].startswith("DeepSpeed") and r["direction"] == direction), key=lambda r: r["gib_per_s"])
        out.append(f"{direction}: on {ov_on['gib_per_s']:.2f} ({ov_on['gib_per_s']/ds['gib_per_s']:.2f}x) off {ov_off['gib_per_s']:.2f} ({ov_off['gib_per_s']/ds['gib_per_s']:.2f}x) DS {ds['gib_per_s']:.2f} [{ds['config']}]")
    subs = [f"{r['config']}/{r['direction']}={r['submit_ms']:.3f}" for r in rows if r.get("submit_ms") is not None and r["engine"] == "oversub"]
    print(f, "|", " | ".join(out), "|", "; ".join(subs))
