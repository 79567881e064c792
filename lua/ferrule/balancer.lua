-- The in-NGINX balancer: balance() routes (canary, affinity) and picks the peer,
-- rewrite() does the routing first where the rewrite phase runs, log() feeds EWMA.
local ngx_balancer = require("ngx.balancer")
local store = require("ferrule.store")
local util = require("ferrule.util")
local expr = require("ferrule.expr")
local canary = require("ferrule.canary")
local round_robin = require("ferrule.algorithms.round_robin")
local ewma = require("ferrule.algorithms.ewma")
local chash = require("ferrule.algorithms.chash")
local sticky = require("ferrule.algorithms.sticky")
local certificate = require("ferrule.certificate")
local fast = require("ferrule.fast")
local metrics = require("ferrule.metrics")

local ngx = ngx
local ngx_var = ngx.var
local math_min = math.min
local tonumber = tonumber
local find = string.find
local sub = string.sub

local _M = {}

-- per-worker state
local backends = {} -- [name] = backend object (see build)
local state = { gen = nil, versions = {} }
_M.SYNC_INTERVAL = 0.05
_M.FAILURE_PENALTY = 1.0 -- seconds of latency charged to a failed attempt

local function var_get(name)
    return ngx_var[name]
end

-- Worker-local object for one decoded backend. Algorithm instances are
-- created lazily on first use.
local function build(b, version)
    local eps = {}
    for i, e in ipairs(b.endpoints or {}) do
        eps[i] = {
            address = e.address,
            port = e.port,
            host = util.peer_host(e.address),
            key = util.endpoint_key(e.address, e.port),
        }
    end
    local obj = {
        name = b.name,
        version = version,
        config = b,
        endpoints = eps,
        n = #eps,
        canary = b.canary,
        affinity = b.affinity,
        ewma = b.load_balance == "ewma",
    }
    if b.upstream_hash_by then
        obj.hash_expr = expr.parse(b.upstream_hash_by)
        obj.subset_size = b.upstream_hash_by_subset_size
    end
    if obj.canary and obj.canary.header then
        obj.canary_header_var = canary.header_var(obj.canary.header)
    end
    -- the variables route() reads, named once per version, not per request
    if obj.canary and obj.canary.cookie then
        obj.canary_cookie_var = "cookie_" .. obj.canary.cookie
    end
    if obj.affinity then
        obj.affinity_cookie_var = "cookie_" .. obj.affinity.cookie_name
    end
    return obj
end

local function apply(name, b, version)
    if b == nil then
        backends[name] = nil
    else
        backends[name] = build(b, version)
    end
end

-- Which hosts have a certificate posted (certificate.configured): cached per
-- worker until the generation moves (certificate writes move it, store.touch).
local tls_hosts = {}

local tls_gen = nil

local function sync()
    local ok, err = pcall(store.sync, state, apply)
    if not ok then
        ngx.log(ngx.ERR, "ferrule: backend sync failed: ", err)
    end
    -- keyed on the store's generation, not on the sync's success
    local g = store.generation()
    if g ~= tls_gen then
        tls_hosts, tls_gen = {}, g
    end
end
_M.sync = sync

-- An algorithm's state for a backend, made on first use (most backends never
-- need most algorithms).
local function lazily(b, field, new)
    local v = b[field]
    if not v then
        v = new(b.endpoints)
        b[field] = v
    end
    return v
end

local function rr_of(b)
    return lazily(b, "rr", round_robin.new)
end

local function ring_of(b)
    return lazily(b, "ring", chash.new)
end

-- The affinity state of backend b for affinity settings aff: b's own, or the
-- primary's on a canary backend (affinity-canary-behavior sticky), whose mode
-- then decides.
local function sticky_of(b, aff)
    if aff.affinity_mode ~= "balanced" then
        return lazily(b, "sticky", sticky.new)
    end
    local st = b.sticky_balanced
    if not st then
        st = sticky.new(b.endpoints, { balanced = true, backend = b.name, ring = ring_of(b) })
        b.sticky_balanced = st
    end
    return st
end

local function pick(b, tried)
    if b.hash_expr then
        local key = expr.eval(b.hash_expr, var_get)
        if b.subset_size then
            return ring_of(b):pick_subset(key, b.subset_size, tried)
        end
        return ring_of(b):pick(key, tried)
    end
    if b.ewma then
        return lazily(b, "ewma_alg", ewma.new):pick(tried)
    end
    return rr_of(b):pick(tried)
end

function _M.get_backend(name)
    return backends[name]
end

function _M.worker_state()
    return state, backends
end

local reported_gen, reported_at = nil, 0

-- The C fast path's zone does not mirror the store: it is new (a reload made it),
-- a host did not fit, or the last write went to another zone (an old worker's,
-- during a reload). Mirror the store into it again: one worker does it, under the
-- writer lock; a failed attempt is retried after 10 s.
local retry_at = 0
local function stale_fast()
    local synced = fast.synced()
    return synced == false or (synced and store.fast_epoch() ~= fast.epoch())
end

local function resync_fast(now)
    if now < retry_at or not stale_fast() then
        return
    end
    local ok, err = store.locked(function()
        if not stale_fast() then
            return true
        end
        if not fast.resync(store.names(), store.decoded, (certificate.hosts())) then
            return false
        end
        store.fast_written()
        return true
    end)
    retry_at = ok and 0 or now + 10
    if err then
        ngx.log(ngx.ERR, "ferrule: fast path resync: ", err)
    end
end

local function timer(premature)
    if premature then
        return
    end
    sync()
    local now = ngx.now()
    resync_fast(now)
    if state.gen ~= reported_gen or now - reported_at >= 1 then
        reported_gen, reported_at = state.gen, now
        pcall(store.report, ngx.worker.pid(), state.gen or 0)
    end
end

local function prune_timer(premature)
    if premature then
        return
    end
    ewma.prune(ngx.now(), 600)
end

function _M.init_worker()
    math.randomseed(ngx.now() * 1000 + ngx.worker.pid())
    sync() -- full load: the shared dict survives a reload (HUP)
    local ok, err = ngx.timer.every(_M.SYNC_INTERVAL, timer)
    if not ok then
        ngx.log(ngx.ERR, "ferrule: cannot start sync timer: ", err)
    end
    ngx.timer.every(60, prune_timer)
    metrics.init_worker()
end

local function unavailable(msg, name)
    ngx.log(ngx.WARN, "ferrule: ", msg, " \"", name or "", "\", returning 503")
    return ngx.exit(503)
end

-- Where balance() sends a request no backend serves. The balancer phase can only
-- fail (502), and most locations have no rewrite phase (it costs every request):
-- NGINX's own small servers (nginx.conf) answer the 503 and the ssl-redirect.
-- { unavailable = "unix:...", redirect = "unix:..." }, set by ferrule.init.
local answers = {}

function _M.set_answers(a)
    answers = a or {}
end

-- A request rewrite() let through (gRPC, HTTPS backends, rewrite-target, a body...) is not
-- answered here when an update lands before its balancer phase: the answering
-- servers speak HTTP/1.1 only. It fails as NGINX fails it (502).
local function routed_early()
    return ngx.ctx.ferrule_routed
end

local function answer(kind, msg, name)
    if msg then
        ngx.log(ngx.WARN, "ferrule: ", msg, " \"", name or "", "\", answering ", kind)
    end
    local addr = answers[kind]
    local ok, err = false, "no server configured to answer it"
    if routed_early() then
        err = "the rewrite phase ran"
    elseif addr then
        ok, err = ngx_balancer.set_current_peer(addr)
    end
    if not ok then
        ngx.log(ngx.ERR, "ferrule: cannot answer ", kind, ": ", err)
        return ngx.exit(ngx.ERROR)
    end
end

-- Brings the worker to the latest generation posted: one shared dict get while
-- nothing changes, so that the request after a POST sees it.
local function refresh()
    if store.generation() ~= state.gen then
        sync()
    end
end

local function has_tls(host)
    local v = tls_hosts[host]
    if v == nil then
        v = certificate.configured(host)
        tls_hosts[host] = v
    end
    return v
end

-- ssl-redirect: decided per request rather than rendered, so that a host gaining or
-- losing TLS needs no reload. $ferrule_redirect_host is the server's host where the
-- annotation allows the redirect, "" elsewhere.
local function redirects()
    local rh = ngx_var.ferrule_redirect_host
    return rh and rh ~= "" and has_tls(rh) and ngx_var.ferrule_scheme == "http"
end

-- affinity table -> set of its `ingresses` (built on first use, per version)
local ingress_sets = setmetatable({}, { __mode = "k" })

-- $ferrule_affinity_scope, "namespace/name /path": the location's Ingress and the
-- cookie's default Path (ingress-nginx's: the Ingress path). Without it (a
-- hand-written configuration): no Ingress, and Path=/.
local function affinity_scope()
    local scope = ngx_var.ferrule_affinity_scope
    local sp = scope and find(scope, " ", 1, true)
    if not sp then
        return "", nil
    end
    return sub(scope, 1, sp - 1), sub(scope, sp + 1)
end

-- Whether a location of `ingress` sets `aff`'s cookie: that Ingress asked for
-- affinity, or the backend names no Ingress (every location).
local function cookie_here(aff, ingress)
    local list = aff.ingresses
    if not list then
        return true
    end
    local set = ingress_sets[aff]
    if not set then
        set = {}
        for _, i in ipairs(list) do
            set[i] = true
        end
        ingress_sets[aff] = set
    end
    return set[ingress] == true
end

-- Sends the affinity cookie with `value`, from the phase that routes the request
-- (response headers can still be set in the balancer phase), again when a retry
-- moves the session. Other Set-Cookie headers stay; an earlier one of this cookie
-- is replaced.
local function send_cookie(aff, value)
    local ingress, default_path = affinity_scope()
    if not cookie_here(aff, ingress) then
        return
    end
    -- ingress-nginx's default Path is the Ingress path: two Ingresses on one host
    -- keep their cookies apart. A location without it sends "/".
    local path = not aff.path and default_path or nil
    local https = aff.secure == nil and ngx_var.https == "on"
    local cookie = sticky.cookie(aff, value, path ~= "" and path or nil, https, ngx.time(),
        aff.conditional_samesite_none and ngx_var.http_user_agent or nil)
    local existing = ngx.header["Set-Cookie"]
    if existing == nil then
        ngx.header["Set-Cookie"] = cookie
        return
    end
    local prefix = aff.cookie_name .. "="
    local out = {}
    for _, c in ipairs(type(existing) == "table" and existing or { existing }) do
        if c:sub(1, #prefix) ~= prefix then
            out[#out + 1] = c
        end
    end
    out[#out + 1] = cookie
    ngx.header["Set-Cookie"] = out
end

-- Canary and affinity, decided once per request: in rewrite() where that phase
-- runs, else in balance() (which can still set the cookie header). Returns the
-- backend chosen and the endpoint an affinity cookie names or a new session was
-- given (nil without affinity); leaves both in ctx for retries and log().
local function route(ctx, b)
    local aff, aff_var = b.affinity, b.affinity_cookie_var
    local ep -- the endpoint the affinity cookie names, once found
    local c = b.canary
    if c then
        local cb = backends[c.backend]
        -- The canary side's affinity (affinity-canary-behavior): the primary's
        -- (sticky, the default), or the canary backend's own (legacy).
        local caff, cvar = aff, aff_var
        if c.legacy_affinity and cb then
            caff, cvar = cb.affinity, cb.affinity_cookie_var
        end
        -- A request stuck to an endpoint stays there, on either side, before any
        -- canary rule (ingress-nginx: an affinitized request keeps its balancer).
        local stuck = aff_var and ngx_var[aff_var]
        ep = stuck and sticky_of(b, aff):lookup(stuck)
        if ep then
            cb = nil
        elseif cb and cb.n > 0 then
            local cstuck = cvar and ngx_var[cvar]
            ep = cstuck and sticky_of(cb, caff):lookup(cstuck)
            if ep then
                b, aff, aff_var = cb, caff, cvar
                cb = nil
            end
        end
        if cb and cb.n > 0 then
            local hv = b.canary_header_var and ngx_var[b.canary_header_var]
            local cv = b.canary_cookie_var and ngx_var[b.canary_cookie_var]
            if canary.decide(c, hv, cv, math.random) then
                b, aff, aff_var = cb, caff, cvar
            end
        end
        -- an unknown or empty canary backend falls back to the primary
        -- (ingress-nginx behaviour)
        ctx.ferrule_backend = b
        if b.name == c.backend then
            -- the metrics' canary label (ingress-nginx: the alternative upstream)
            ctx.ferrule_canary = b.name
            if metrics.module() then
                ngx_var.ferrule_canary = b.name
            end
        end
    end
    if not aff or b.n == 0 then
        return b, nil
    end
    local st = sticky_of(b, aff)
    ep = ep or st:lookup(ngx_var[aff_var])
    if not ep then
        local value
        ep, value = st:new_session(rr_of(b), nil)
        send_cookie(aff, value)
        ctx.ferrule_cookie_sent = true
    end
    ctx.ferrule_backend = b
    ctx.ferrule_sticky_peer = ep
    ctx.ferrule_affinity = aff
    return b, ep
end

-- rewrite_by_lua, rendered only where something must come before the balancer
-- phase (other protocols than HTTP, rewrite-target, snippets: see the renderer)
-- and run by every request with a body (so that its 503 or redirect comes before
-- the body is read). balance() finds a plain backend again by $ferrule_backend; a
-- routed one is left in ngx.ctx.
function _M.rewrite()
    refresh()
    local ctx = ngx.ctx
    ctx.ferrule_routed = true
    if redirects() then
        return ngx.redirect("https://" .. ngx_var.host .. ngx_var.request_uri,
            answers.redirect_code or 308)
    end
    local name = ngx_var.ferrule_backend
    if not name or name == "" then
        return unavailable("$ferrule_backend is empty", name)
    end
    local b = backends[name]
    if not b then
        return unavailable("unknown backend", name)
    end
    b = route(ctx, b)
    if b.n == 0 then
        return unavailable("no endpoints for backend", b.name)
    end
end

-- A retry after a failed attempt: a peer not tried yet for this request. NGINX
-- also retries on its own, without set_more_tries, when a kept-alive connection
-- fails; balance() then kept nothing for a plain backend, which is looked up again.
local function retry(ctx)
    local b = ctx.ferrule_backend
    if not b then
        b = backends[ngx_var.ferrule_backend or ""]
        if not b or b.n == 0 then
            return nil, nil
        end
        ctx.ferrule_backend = b
    end
    local tried = ctx.ferrule_tried
    if not tried then
        tried = {}
        ctx.ferrule_tried = tried
        local first = ctx.ferrule_first
        if first then
            tried[first.key] = true
        end
    end
    return b, pick(b, tried)
end

-- balancer_by_lua: the peer for this attempt.
-- Most requests have no rewrite phase (see answer()): this is then where the
-- worker catches up with the store and where the ssl-redirect, the canary, the
-- affinity and the 503 are decided. Where rewrite() ran, the same checks find
-- nothing more to do.
function _M.balance()
    local b, ep, ctx
    local failed = ngx_balancer.get_last_failure()
    if not failed then
        refresh()
    end
    -- The first attempt only: a retry must not turn into a redirect (with, maybe, a
    -- cookie already set for the peer that failed) because a certificate came.
    if not failed and redirects() and not routed_early() then
        return answer("redirect")
    end
    if failed then
        ctx = ngx.ctx
        b, ep = retry(ctx)
        if not b then
            return answer("unavailable", "no usable backend left to retry", ngx_var.ferrule_backend)
        end
        local aff = ctx.ferrule_affinity
        if ep and aff and (ctx.ferrule_cookie_sent or aff.change_on_failure) then
            -- The session follows the retry: a new one always (its cookie named the
            -- failed peer), an established one where change_on_failure says so. A
            -- balanced cookie cannot name the peer just picked, so the retry goes
            -- where a new key maps (failing that, the cookie stays as it was).
            local st = sticky_of(b, aff)
            local value
            if st.balanced then
                local moved
                moved, value = st:new_session(nil, ctx.ferrule_tried)
                ep = moved or ep
            else
                value = st:id(ep)
            end
            if value then
                send_cookie(aff, value)
                ctx.ferrule_cookie_sent = true
            end
        end
    else
        local name = ngx_var.ferrule_backend
        b = backends[name]
        if not b then
            return answer("unavailable", "unknown backend", name)
        end
        if b.canary or b.affinity then
            ctx = ngx.ctx
            if ctx.ferrule_routed then
                b = ctx.ferrule_backend or b
                ep = ctx.ferrule_sticky_peer
            else
                b, ep = route(ctx, b)
            end
        end
        if b.n == 0 then
            return answer("unavailable", "no endpoints for backend", b.name)
        end
        ep = ep or pick(b, nil)
        local more = math_min(b.n - 1, 3)
        if more > 0 or b.ewma then
            -- state for a retry (below) or for log(): only when there can be one
            ctx = ctx or ngx.ctx
            ctx.ferrule_backend = b
            ctx.ferrule_first = ep
            if more > 0 then
                local ok, err = ngx_balancer.set_more_tries(more)
                if not ok then
                    ngx.log(ngx.ERR, "ferrule: set_more_tries: ", err)
                end
            end
        end
    end
    if not ep then
        return ngx.exit(ngx.ERROR)
    end
    if ctx and ctx.ferrule_tried then
        ctx.ferrule_tried[ep.key] = true
    end
    if b.ewma then
        local attempts = ctx.ferrule_attempts
        if not attempts then
            attempts = {}
            ctx.ferrule_attempts = attempts
        end
        attempts[#attempts + 1] = ep.key
        ewma.started(ep.key)
    end
    local ok, err = ngx_balancer.set_current_peer(ep.host, ep.port)
    if not ok then
        ngx.log(ngx.ERR, "ferrule: set_current_peer ", ep.key, ": ", err)
        return ngx.exit(ngx.ERROR)
    end
end

-- log_by_lua: feed EWMA with the observed latencies, attempt by attempt.
function _M.log()
    local ctx = ngx.ctx
    local b = ctx.ferrule_backend
    if not b or not b.ewma then
        return
    end
    local attempts = ctx.ferrule_attempts
    if not attempts then
        return
    end
    local resp = util.split_upstream_list(ngx_var.upstream_response_time)
    local conn = util.split_upstream_list(ngx_var.upstream_connect_time)
    local now = ngx.now()
    local last = #attempts
    for i, key in ipairs(attempts) do
        ewma.finished(key)
        local rtt
        if i < last or conn[i] == "-" then
            -- the attempt failed (we retried) or never connected
            rtt = _M.FAILURE_PENALTY
        else
            rtt = tonumber(resp[i]) or tonumber(conn[i])
        end
        if rtt then
            ewma.observe(key, rtt, now)
        end
    end
end

return _M
