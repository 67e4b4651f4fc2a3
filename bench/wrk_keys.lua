-- wrk_keys.lua — wrk GETs the keys of an index in turn, so that wrk does the same work as
-- `conveyor-bench s3-get --index F` (each request a different object, cycling):
--
--   wrk -t2 -c64 -d10s --latency -s bench/wrk_keys.lua http://127.0.0.1:PORT -- KEYS BUCKET
--
-- KEYS: a JSON array of keys relative to the bucket (conveyor's index format), or a text file
-- with one key per line. Requests go to /BUCKET/<key> (percent-encoded except '/'); each
-- wrk thread cycles through all the keys from its own starting point. With a single
-- distinct key wrk sends a static request (no Lua per request), as plain `wrk URL` would.
--
-- At the end one line on stdout, `wrk_keys.lua: {...}`: requests, bytes (wrk counts the
-- response headers too), duration_us, latency p50/p90/p99/max/mean in microseconds, and wrk's
-- error counts (connect, read, write, timeout, status = non-2xx/3xx responses).

local function read_keys(path)
    local f = assert(io.open(path, "rb"), "wrk_keys.lua: cannot open " .. tostring(path))
    local text = f:read("*a")
    f:close()
    local keys = {}
    if text:match("^%s*%[") then
        -- a JSON array of strings
        local esc = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
        local i, n = text:find("[", 1, true) + 1, #text
        while i <= n do
            local c = text:sub(i, i)
            if c == '"' then
                local buf, j = {}, i + 1
                while true do
                    local d = text:sub(j, j)
                    assert(d ~= "", "wrk_keys.lua: unterminated string in " .. path)
                    if d == '"' then break end
                    if d == "\\" then
                        local e = text:sub(j + 1, j + 1)
                        if e == "u" then
                            local cp = tonumber(text:sub(j + 2, j + 5), 16)
                            assert(cp and (cp < 0xD800 or cp >= 0xE000), "wrk_keys.lua: surrogate escapes are not supported")
                            if cp < 0x80 then buf[#buf + 1] = string.char(cp)
                            elseif cp < 0x800 then buf[#buf + 1] = string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
                            else buf[#buf + 1] = string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64) end
                            j = j + 6
                        else
                            buf[#buf + 1] = assert(esc[e], "wrk_keys.lua: bad escape in " .. path)
                            j = j + 2
                        end
                    else
                        buf[#buf + 1] = d
                        j = j + 1
                    end
                end
                keys[#keys + 1] = table.concat(buf)
                i = j + 1
            else
                i = i + 1
            end
        end
    else
        for line in text:gmatch("[^\r\n]+") do keys[#keys + 1] = line end
    end
    assert(#keys > 0, "wrk_keys.lua: no keys in " .. path)
    return keys
end

local function encode(s)
    return (s:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

local thread_count = 0
function setup(thread) -- main Lua state, once per thread
    thread:set("thread_id", thread_count)
    thread_count = thread_count + 1
end

function init(args) -- each thread's own Lua state
    local keys = read_keys(args[1] or error("wrk_keys.lua: usage: -s wrk_keys.lua URL -- KEYS BUCKET"))
    local prefix = "/" .. encode(args[2] or error("wrk_keys.lua: give the bucket after the keys file")) .. "/"
    local distinct, seen = 0, {}
    for _, k in ipairs(keys) do
        if not seen[k] then seen[k] = true; distinct = distinct + 1 end
    end
    if distinct == 1 then
        wrk.path = prefix .. encode(keys[1]) -- static request
        return
    end
    local reqs = {}
    for i, k in ipairs(keys) do reqs[i] = wrk.format("GET", prefix .. encode(k)) end
    local n = #reqs
    -- threads start spread over the keys (golden-ratio offsets), then step by one
    local next_i = math.floor(n * ((thread_id or 0) * 0.6180339887 % 1))
    request = function()
        next_i = next_i + 1
        if next_i > n then next_i = 1 end
        return reqs[next_i]
    end
end

function done(summary, latency, requests) -- main Lua state
    local e = summary.errors
    io.write(string.format(
        'wrk_keys.lua: {"requests":%d,"bytes":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
        '"errors_connect":%d,"errors_read":%d,"errors_write":%d,"errors_timeout":%d,"errors_status":%d}\n',
        summary.requests, summary.bytes, summary.duration, latency:percentile(50), latency:percentile(90),
        latency:percentile(99), latency.max, latency.mean, e.connect, e.read, e.write, e.timeout, e.status))
end
