#!/usr/bin/env bash
# nginx_bucket.sh — an emulated remote object store for the S3 benchmarks: Debian's nginx on
# loopback serving a directory as path-style buckets, with a configurable first-byte delay.
#
#   nginx_bucket.sh start --root DIR --state-dir S [--delay-ms N] [--throttle-rate R] [--throttle-burst B] [--checksums FILE]
#                         [--port P] [--workers W] [--writable]
#       starts nginx (daemon, pid in S/nginx.pid) and prints its endpoint URL, e.g.
#       http://127.0.0.1:41234 (also written to S/endpoint).
#   nginx_bucket.sh stop --state-dir S
#       stops the nginx that `start` left in S (only that one: its pid file, checked against
#       its command line); removes nothing else.
#   nginx_bucket.sh run --root DIR [--delay-ms N] [--throttle-rate R] [--throttle-burst B] [--port P]
#                       [--workers W] [--writable] [--state-dir S] -- CMD...
#       start, run CMD with CONVEYOR_BENCH_ENDPOINT set to the endpoint URL, stop; exits with
#       CMD's status. Without --state-dir a temporary one is used and removed.
#   nginx_bucket.sh throttle --state-dir S [--rate R] [--burst B]
#       sets the throttle of the running nginx (R 0: lifted) when --rate is given, then prints
#       its state and counts as one JSON line (see below).
#   nginx_bucket.sh install [PKG...]
#       installs nginx and libnginx-mod-http-lua (and any extra Debian packages named) when
#       missing; touches nothing when all are installed. `start` and `run` do this themselves.
#
# What it serves (every subfolder of DIR is a bucket):
#   GET/HEAD /<bucket>/<key>       the file DIR/<bucket>/<key> (nginx's static module: Range
#                                  requests, ETag, Last-Modified; sendfile). Query strings are
#                                  ignored, so signed S3 requests work; signatures are not checked.
#   GET /<bucket>?list-type=2&...  ListObjectsV2 (prefix, delimiter, max-keys, start-after,
#                                  continuation-token, encoding-type=url), from a `find` of the
#                                  folder on a listing's first page (later pages reuse it; fine for
#                                  tens of thousands of keys); without list-type, ListObjects v1
#                                  (marker). HEAD /<bucket>: HeadBucket.
#   PUT/DELETE /<bucket>/<key>     only with --writable (nginx's DAV module: the body is stored as
#                                  is; 201 is turned into S3's 200; no ETag in the reply). No
#                                  multipart uploads, no aws-chunked bodies, no copies.
#   missing key                    404 with an S3-style NoSuchKey XML body.
# The delay (--delay-ms, default 0; fractions allowed) is an ngx.sleep in the access phase of
# every request, before nginx opens the file: the first byte arrives after it, the rest at
# loopback speed. It does not block the worker: any number of requests sleep at once.
#
# Checksums (--checksums FILE): lines "<bucket>/<key> <algorithm> <base64 value>" (algorithm
# as in S3's header names: crc64nvme, crc32c, ...), loaded when nginx starts. A GET or HEAD
# of one of those objects with x-amz-checksum-mode: ENABLED and no Range is answered with
# x-amz-checksum-<algorithm> and x-amz-checksum-type: FULL_OBJECT, as S3 does; nothing else
# changes. (bench/checksum_cost.sh writes the file.)
#
# Throttling (--throttle-rate R, default 0: none): a token bucket of R requests per second
# holding at most B (--throttle-burst, default max(1, R/100): 10 ms of the rate), one for all
# workers (a lua_shared_dict). Each S3 request takes a token when it arrives; one that finds
# none is answered, after the delay like any other, `503 Slow Down` with S3's error body
# (<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>...) and
# no x-amz-error-code header, as S3 answers a GET. The control endpoint, never throttled or
# delayed:
#   PUT /_conveyor/throttle?rate=R[&burst=B]   a new rate (0: lifted) and burst, from now on;
#                                              the bucket starts full
#   GET /_conveyor/throttle                    {"rate":R,"burst":B,"served":N,"throttled":M}
# served and throttled count the S3 requests since start (served: let through, whatever their
# status); take differences to count one run.
#
# Tuning (for a small machine shared by server and client): W worker processes (default 1;
# `auto` = one per core; with more than one the listen socket uses reuseport so the kernel
# spreads connections evenly), access_log off, sendfile on, tcp_nopush/tcp_nodelay, keepalive
# of 10^9 requests and 300 s, open_file_cache (no open/fstat per GET: more of the shared CPU
# for the client), worker_connections 8192. See bench/README.md for why 1 worker is the default.
#
# nginx runs as the current user (when that is root, its workers stay root instead of
# dropping to nobody) with every path in the state folder: prefix, config, pid, error log
# (S/error.log), temp folders. It never reads or touches /etc/nginx or the system service.
# The port is a free one, chosen by binding port 0 with /usr/bin/python3 unless --port is given.
set -euo pipefail

prog=$(basename "$0")
nginx_bin=${NGINX:-/usr/sbin/nginx}
module_dir=/usr/lib/nginx/modules

die() { echo "$prog: $*" >&2; exit 2; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

# ensure_packages PKG... — apt-get install (as root or through sudo) what dpkg-query says is
# missing. A temporary /usr/sbin/policy-rc.d that exits 101 (and RUNLEVEL=1) keeps the package
# scripts from starting the system nginx service; it is removed afterwards (an existing one is
# left alone).
ensure_packages() {
    local missing=() p status
    for p in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null || die "missing packages ${missing[*]} and no apt-get; install them yourself"
    local as_root=()
    if [[ $(id -u) != 0 ]]; then
        command -v sudo >/dev/null || die "missing packages ${missing[*]}; not root and no sudo: install them yourself"
        as_root=(sudo)
    fi
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [[ ! -e $policy ]]; then
        "${as_root[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
        made_policy=1
    fi
    echo "$prog: installing ${missing[*]} (system services kept from starting)" >&2
    local rc=0
    { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get update -q &&
      "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${missing[@]}"; } >&2 || rc=$?
    if ((made_policy)); then "${as_root[@]}" rm -f "$policy"; fi
    ((rc == 0)) || die "apt-get failed (status $rc)"
}

ensure_nginx() {
    ensure_packages nginx libnginx-mod-http-lua
    [[ -x $nginx_bin ]] || die "$nginx_bin not found"
    [[ -f $module_dir/ngx_http_lua_module.so ]] || die "$module_dir/ngx_http_lua_module.so not found (libnginx-mod-http-lua)"
}

free_port() {
    "${CONVEYOR_PYTHON:-/usr/bin/python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Options shared by start, run and throttle; sets root, state_dir, delay_ms, rate, burst, port,
# workers, writable, rest.
parse_opts() {
    root="" state_dir="" delay_ms=0 rate="" burst="" port="" workers=1 writable=0 checksums="" rest=()
    while (($#)); do
        case $1 in
            --root) root=${2:?}; shift 2 ;;
            --state-dir) state_dir=${2:?}; shift 2 ;;
            --delay-ms) delay_ms=${2:?}; shift 2 ;;
            --throttle-rate|--rate) rate=${2:?}; shift 2 ;;
            --throttle-burst|--burst) burst=${2:?}; shift 2 ;;
            --port) port=${2:?}; shift 2 ;;
            --workers) workers=${2:?}; shift 2 ;;
            --writable) writable=1; shift ;;
            --checksums) checksums=${2:?}; shift 2 ;;
            --) shift; rest=("$@"); break ;;
            -h|--help) usage ;;
            *) die "unknown option $1 (see $prog --help)" ;;
        esac
    done
    [[ $delay_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delay-ms wants a number of milliseconds, got '$delay_ms'"
    [[ $workers =~ ^([1-9][0-9]*|auto)$ ]] || die "--workers wants a count or auto, got '$workers'"
    [[ -z $port || $port =~ ^[0-9]+$ ]] || die "--port wants a number, got '$port'"
    [[ -z $rate || $rate =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--throttle-rate wants requests per second, got '$rate'"
    [[ -z $burst || $burst =~ ^[1-9][0-9]*$ ]] || die "--throttle-burst wants a positive count, got '$burst'"
    [[ -z $checksums || -f $checksums ]] || die "--checksums wants a file, got '$checksums'"
    [[ -z $checksums ]] || checksums=$(cd "$(dirname "$checksums")" && pwd)/$(basename "$checksums")
}

write_config() {
    local conf=$state_dir/nginx.conf delay_s reuseport="" user_line="" write_block nofile
    local throttle_rate=${rate:-0} throttle_burst=${burst:-0}
    nofile=$(ulimit -Hn)
    [[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
    delay_s=$(awk -v ms="$delay_ms" 'BEGIN { printf "%.6f", ms / 1000 }')
    [[ $workers != 1 ]] && reuseport=" reuseport"
    # A root master would run its workers as nobody; keep them as the current user.
    [[ $(id -u) == 0 ]] && user_line="user $(id -un) $(id -gn);"
    if ((writable)); then
        write_block='dav_methods PUT DELETE;
            create_full_put_path on;
            dav_access user:rw group:r all:r;
            client_max_body_size 0;
            header_filter_by_lua_block { if ngx.status == 201 then ngx.status = 200 end; require("s3_checksums").filter() }'
    else
        write_block='limit_except GET { deny all; }
            header_filter_by_lua_block { require("s3_checksums").filter() }'
    fi
    cat >"$conf" <<EOF
# Written by bench/nginx_bucket.sh; every path is under $state_dir.
$user_line
load_module $module_dir/ndk_http_module.so;
load_module $module_dir/ngx_http_lua_module.so;
worker_processes $workers;
worker_rlimit_nofile $nofile;
pid $state_dir/nginx.pid;
error_log $state_dir/error.log warn;
daemon on;

events {
    worker_connections 8192;
}

http {
    access_log off;
    server_tokens off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    open_file_cache max=200000 inactive=300s;
    open_file_cache_valid 2s;
    open_file_cache_errors off;
    default_type application/octet-stream;
    types { }
    client_body_temp_path $state_dir/tmp/body;
    proxy_temp_path $state_dir/tmp/proxy;
    fastcgi_temp_path $state_dir/tmp/fastcgi;
    uwsgi_temp_path $state_dir/tmp/uwsgi;
    scgi_temp_path $state_dir/tmp/scgi;
    lua_package_path "$state_dir/lua/?.lua;;";
    lua_shared_dict s3_throttle 1m;
    init_by_lua_block {
        require("s3_throttle").init($throttle_rate, $throttle_burst)
        require("s3_checksums").load("$checksums")
    }

    server {
        listen 127.0.0.1:$port backlog=8192$reuseport;
        server_name _;
        root $root;
        autoindex off;
        log_not_found off;
        index __no_index__;
        error_page 404 = @no_such_key;

        # The throttle (a token taken on arrival) and the first-byte delay, before the file is
        # opened. Internal redirects (the 404 page) are not counted and do not sleep twice.
        access_by_lua_block {
            if ngx.req.is_internal() then return end
            local throttle = require("s3_throttle")
            local ok = throttle.admit()
            local d = $delay_s
            if d > 0 then ngx.sleep(d) end
            if not ok then return throttle.slow_down() end
        }

        # The throttle's control endpoint (nginx_bucket.sh --help).
        location = /_conveyor/throttle {
            access_by_lua_block { }
            content_by_lua_block { require("s3_throttle").control() }
        }

        # ListObjects(V2) and HeadBucket: /<bucket> or /<bucket>/ with no key.
        location ~ "^/(?<bucket>[^/]+)/?\$" {
            content_by_lua_block { require("s3_list").handle("$root", ngx.var.bucket) }
        }

        location / {
            $write_block
        }

        location @no_such_key {
            default_type application/xml;
            return 404 '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Resource>\$uri</Resource></Error>\n';
        }
    }
}
EOF
    mkdir -p "$state_dir/lua"
    cat >"$state_dir/lua/s3_checksums.lua" <<'EOF'
-- The checksums of bench/nginx_bucket.sh --checksums FILE: lines "<bucket>/<key> <algorithm>
-- <base64>", loaded once before the workers start; a whole-object GET or HEAD that asks for
-- them (x-amz-checksum-mode: ENABLED, no Range) gets x-amz-checksum-<algorithm> and
-- x-amz-checksum-type, as S3 answers.
local M = {}
local sums = {}

function M.load(path)
    if path == "" then return end
    for line in io.lines(path) do
        local name, algorithm, value = line:match("^(%S+)%s+(%S+)%s+(%S+)$")
        if name then sums["/" .. name] = {algorithm, value} end
    end
end

function M.filter()
    if ngx.status ~= 200 then return end
    local h = ngx.req.get_headers()
    local mode = h["x-amz-checksum-mode"]
    if not mode or mode:upper() ~= "ENABLED" or h["range"] then return end
    local s = sums[ngx.var.uri]
    if not s then return end
    ngx.header["x-amz-checksum-" .. s[1]] = s[2]
    ngx.header["x-amz-checksum-type"] = "FULL_OBJECT"
end

return M
EOF
    cat >"$state_dir/lua/s3_throttle.lua" <<'EOF'
-- The token bucket of bench/nginx_bucket.sh --throttle-rate, one for all workers.
local M = {}
local dict = ngx.shared.s3_throttle

-- A new rate and burst (0: the default, 10 ms of the rate), with a full bucket.
local function set(rate, burst)
    if burst == nil or burst <= 0 then burst = math.max(1, math.floor(rate / 100)) end
    dict:set("rate", rate)
    dict:set("burst", burst)
    dict:set("tokens", burst)
    dict:set("at", ngx.now())
end

function M.init(rate, burst)
    set(rate, burst)
    dict:set("served", 0)
    dict:set("throttled", 0)
end

-- The bucket's read-modify-write under a lock that every worker takes (add is atomic, and
-- nothing between add and delete yields, so the holder lets go within microseconds).
local function take_token()
    for _ = 1, 100000 do
        if dict:add("lock", true, 0.01) then
            ngx.update_time()
            local now, rate, burst = ngx.now(), dict:get("rate"), dict:get("burst")
            local tokens = math.min(burst, dict:get("tokens") + (now - dict:get("at")) * rate)
            local ok = tokens >= 1
            if ok then tokens = tokens - 1 end
            dict:set("tokens", tokens)
            dict:set("at", now)
            dict:delete("lock")
            return ok
        end
    end
    return true -- the lock outlived its expiry: let the request through
end

-- true: serve the request; false: throttle it. Counts both.
function M.admit()
    if dict:get("rate") > 0 and not take_token() then
        dict:incr("throttled", 1, 0)
        return false
    end
    dict:incr("served", 1, 0)
    return true
end

-- S3's answer to a request over the rate: 503 SlowDown, the code in the XML body only.
function M.slow_down()
    local id = string.format("%016X", dict:get("throttled"))
    ngx.status = 503
    ngx.header["Content-Type"] = "application/xml"
    ngx.header["x-amz-request-id"] = id
    if ngx.req.get_method() == "HEAD" then -- no body, as S3 answers a HEAD
        ngx.header["Content-Length"] = 0
        ngx.send_headers()
    else
        local body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>' ..
            '<Message>Please reduce your request rate.</Message><RequestId>' .. id ..
            '</RequestId><HostId>nginx-bucket</HostId></Error>\n'
        ngx.header["Content-Length"] = #body
        ngx.print(body)
    end
    return ngx.exit(ngx.HTTP_OK) -- the reply is sent: finish the request here
end

function M.control()
    local method = ngx.req.get_method()
    if method == "PUT" or method == "POST" then
        local args = ngx.req.get_uri_args()
        local rate, burst = tonumber(args.rate), tonumber(args.burst or "0")
        if not rate or rate < 0 or not burst or burst < 0 then
            ngx.status = 400
            ngx.say("want ?rate=R (requests per second, 0: none) and optionally &burst=B")
            return ngx.exit(400)
        end
        set(rate, math.floor(burst))
    elseif method ~= "GET" then
        return ngx.exit(405)
    end
    ngx.header["Content-Type"] = "application/json"
    ngx.print(string.format('{"rate":%s,"burst":%d,"served":%d,"throttled":%d}\n', tostring(dict:get("rate")),
        dict:get("burst"), dict:get("served"), dict:get("throttled")))
end

return M
EOF
    cat >"$state_dir/lua/s3_list.lua" <<'EOF'
-- ListObjectsV2 / ListObjects / HeadBucket over a folder, for bench/nginx_bucket.sh.
local M = {}

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function xml(s)
    return (s:gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&apos;" }))
end

local function url_encode(s) -- S3's encoding-type=url: everything but unreserved characters and '/'
    return (s:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

local function exists_dir(path)
    local f = io.open(path .. "/.", "r")
    if f then f:close(); return true end
    return false
end

-- All files under dir (recursively) as {key=, size=, mtime=}, sorted by key (byte order).
-- The later pages of a listing (fresh=false) reuse the walk of its first page (for 60 s, in
-- this worker) instead of walking again.
local cache = {}
local function walk(root, bucket, prefix, fresh)
    local id = root .. "\0" .. bucket .. "\0" .. prefix
    local c = cache[id]
    if not fresh and c and ngx.now() - c.at < 60 then return c.list end
    local base = root .. "/" .. bucket
    local sub = prefix:match("^(.*/)") or "" -- the deepest folder the prefix names
    local start = base .. "/" .. sub
    local out = {}
    if not exists_dir(start) then return out end
    local p = io.popen("find " .. shell_quote(start) .. " -type f -printf '%P\\t%s\\t%T@\\n' 2>/dev/null")
    for line in p:lines() do
        local rel, size, mtime = line:match("^(.*)\t(%d+)\t([%d%.]+)$")
        if rel then
            local key = sub .. rel
            if key:sub(1, #prefix) == prefix then
                out[#out + 1] = { key = key, size = tonumber(size), mtime = math.floor(tonumber(mtime)) }
            end
        end
    end
    p:close()
    table.sort(out, function(a, b) return a.key < b.key end)
    cache = { [id] = { at = ngx.now(), list = out } }
    return out
end

function M.handle(root, bucket)
    local method = ngx.req.get_method()
    if not exists_dir(root .. "/" .. bucket) then
        ngx.status = 404
        ngx.header["Content-Type"] = "application/xml"
        if method ~= "HEAD" then
            ngx.print('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist.</Message><BucketName>',
                xml(bucket), '</BucketName></Error>\n')
        end
        return ngx.exit(404)
    end
    if method == "HEAD" then return ngx.exit(200) end
    if method ~= "GET" then return ngx.exit(405) end

    local args = ngx.req.get_uri_args()
    local function arg(name) local v = args[name]; if type(v) == "table" then v = v[1] end; if v == true then v = "" end; return v end
    local v2 = arg("list-type") == "2"
    local prefix = arg("prefix") or ""
    local delimiter = arg("delimiter") or ""
    local max_keys = tonumber(arg("max-keys") or "1000") or 1000
    if max_keys > 1000 then max_keys = 1000 end
    local encode = arg("encoding-type") == "url"
    local token = v2 and arg("continuation-token") or nil
    local after = token or (v2 and arg("start-after")) or (not v2 and arg("marker")) or ""
    local enc = encode and url_encode or function(s) return s end

    local items, count, last, last_cp, truncated = {}, 0, nil, nil, false
    for _, o in ipairs(walk(root, bucket, prefix, after == "")) do
        local k = o.key
        local skip = k <= after
        -- resuming after a common prefix: skip every key under it
        if not skip and delimiter ~= "" and after ~= "" and after:sub(-#delimiter) == delimiter and k:sub(1, #after) == after then skip = true end
        if not skip then
            local cp
            if delimiter ~= "" then
                local pos = k:find(delimiter, #prefix + 1, true)
                if pos then cp = k:sub(1, pos + #delimiter - 1) end
            end
            if not (cp and cp == last_cp) then
                if count >= max_keys then truncated = true; break end
                count = count + 1
                if cp then
                    last_cp = cp; last = cp
                    items[#items + 1] = "<CommonPrefixes><Prefix>" .. xml(enc(cp)) .. "</Prefix></CommonPrefixes>"
                else
                    last = k
                    items[#items + 1] = string.format(
                        '<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>&quot;%x-%x&quot;</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>',
                        xml(enc(k)), os.date("!%Y-%m-%dT%H:%M:%S.000Z", o.mtime), o.mtime, o.size, o.size)
                end
            end
        end
    end

    local head = { '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
        "<Name>", xml(bucket), "</Name><Prefix>", xml(enc(prefix)), "</Prefix>" }
    if delimiter ~= "" then head[#head + 1] = "<Delimiter>" .. xml(enc(delimiter)) .. "</Delimiter>" end
    if encode then head[#head + 1] = "<EncodingType>url</EncodingType>" end
    head[#head + 1] = "<MaxKeys>" .. max_keys .. "</MaxKeys><IsTruncated>" .. tostring(truncated) .. "</IsTruncated>"
    if v2 then
        head[#head + 1] = "<KeyCount>" .. count .. "</KeyCount>"
        if token then head[#head + 1] = "<ContinuationToken>" .. xml(token) .. "</ContinuationToken>" end
        if arg("start-after") then head[#head + 1] = "<StartAfter>" .. xml(enc(arg("start-after"))) .. "</StartAfter>" end
        if truncated then head[#head + 1] = "<NextContinuationToken>" .. xml(last) .. "</NextContinuationToken>" end
    else
        head[#head + 1] = "<Marker>" .. xml(enc(arg("marker") or "")) .. "</Marker>"
        if truncated then head[#head + 1] = "<NextMarker>" .. xml(enc(last)) .. "</NextMarker>" end
    end
    ngx.header["Content-Type"] = "application/xml"
    ngx.print(table.concat(head), table.concat(items), "</ListBucketResult>\n")
end

return M
EOF
}

# Our nginx master's pid from S/nginx.pid, if it is alive and really ours (its command line
# names our config); else nothing.
our_pid() {
    local pidfile=$state_dir/nginx.pid pid
    [[ -f $pidfile ]] || return 0
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$state_dir/nginx.conf"; then echo "$pid"; fi
}

cmd_start() {
    [[ -n $root ]] || die "start: --root DIR is required"
    [[ -n $state_dir ]] || die "start: --state-dir S is required"
    [[ -d $root ]] || die "start: $root is not a folder"
    root=$(realpath "$root")
    mkdir -p "$state_dir"
    state_dir=$(realpath "$state_dir")
    [[ -z $(our_pid) ]] || die "start: an nginx from $state_dir is already running (pid $(our_pid)); stop it first"
    ensure_nginx
    mkdir -p "$state_dir/tmp"
    [[ -n $port ]] || port=$(free_port)
    write_config
    rm -f "$state_dir/nginx.pid"
    : >"$state_dir/error.log"
    if ! "$nginx_bin" -p "$state_dir" -c "$state_dir/nginx.conf" -e "$state_dir/error.log" -q; then
        cat "$state_dir/error.log" >&2
        die "start: nginx failed to start (config $state_dir/nginx.conf)"
    fi
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -n $(our_pid) ]] && break
        sleep 0.05
    done
    [[ -n $(our_pid) ]] || { cat "$state_dir/error.log" >&2; die "start: nginx did not write its pid file"; }
    local endpoint=http://127.0.0.1:$port
    echo "$endpoint" >"$state_dir/endpoint"
    echo "$prog: nginx pid $(our_pid), $workers worker(s), delay ${delay_ms} ms, throttle ${rate:-0}/s, serving $root at $endpoint (log $state_dir/error.log)" >&2
    echo "$endpoint"
}

cmd_stop() {
    [[ -n $state_dir ]] || die "stop: --state-dir S is required"
    [[ -d $state_dir ]] || die "stop: no folder $state_dir"
    state_dir=$(realpath "$state_dir")
    local pid i
    pid=$(our_pid)
    if [[ -z $pid ]]; then
        echo "$prog: no nginx of ours running from $state_dir" >&2
        return 0
    fi
    kill -TERM "$pid"
    for ((i = 0; i < 100; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.05
    done
    if [[ -d /proc/$pid ]]; then
        echo "$prog: nginx $pid still running after 5 s; sending KILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$state_dir/nginx.pid" "$state_dir/endpoint"
    echo "$prog: stopped nginx $pid" >&2
}

cmd_throttle() {
    [[ -n $state_dir ]] || die "throttle: --state-dir S is required"
    [[ -n $(our_pid) && -f $state_dir/endpoint ]] || die "throttle: no nginx of ours running from $state_dir"
    local url method=GET
    url="$(<"$state_dir/endpoint")/_conveyor/throttle"
    if [[ -n $rate ]]; then
        method=PUT
        url+="?rate=$rate${burst:+&burst=$burst}"
    fi
    "${CONVEYOR_PYTHON:-/usr/bin/python3}" - "$method" "$url" <<'PY'
import sys, urllib.request
method, url = sys.argv[1:]
with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
    sys.stdout.write(r.read().decode())
PY
}

cmd_run() {
    ((${#rest[@]})) || die "run: give a command after --"
    local tmp_state=""
    if [[ -z $state_dir ]]; then
        tmp_state=$(mktemp -d "${TMPDIR:-/tmp}/nginx-bucket.XXXXXX")
        state_dir=$tmp_state
    fi
    local endpoint
    endpoint=$(cmd_start)
    # shellcheck disable=SC2064 # expand now: the state folder is fixed
    trap "state_dir='$state_dir'; cmd_stop; ${tmp_state:+rm -rf '$tmp_state'}" EXIT
    local rc=0
    CONVEYOR_BENCH_ENDPOINT=$endpoint "${rest[@]}" || rc=$?
    return "$rc"
}

(($#)) || usage
sub=$1
shift
case $sub in
    start) parse_opts "$@"; cmd_start ;;
    stop) parse_opts "$@"; cmd_stop ;;
    run) parse_opts "$@"; cmd_run ;;
    throttle) parse_opts "$@"; cmd_throttle ;;
    install) ensure_packages nginx libnginx-mod-http-lua "$@" ;;
    -h|--help|help) usage ;;
    *) die "unknown subcommand $sub (start, stop, run, throttle, install; see $prog --help)" ;;
esac
