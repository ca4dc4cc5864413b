-- POST one fixed body on every request; print a JSON summary from done().
--
-- Usage: wrk ... -s bench/lua/post.lua URL -- BODY_FILE ["Header: value" ...]
-- The body is read once per thread in init(), before wrk builds its request, so the
-- load loop sends precomputed bytes. done() runs once, in wrk's main thread, and prints
-- one line `BENCH_JSON {...}` that bench/wrk.py parses (latencies in microseconds).

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

function init(args)
   local file = assert(io.open(args[1], "rb"))
   wrk.body = file:read("*a")
   file:close()
   for i = 2, #args do
      local name, value = args[i]:match("^([^:]+):%s*(.*)$")
      if name then
         wrk.headers[name] = value
      end
   end
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,'
         .. '"connect_errors":%d,"read_errors":%d,"write_errors":%d,'
         .. '"status_errors":%d,"timeout_errors":%d,'
         .. '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,'
         .. '"mean_us":%.1f,"max_us":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.mean, latency.max))
end
