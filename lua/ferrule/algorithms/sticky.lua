-- Cookie affinity: maps an affinity cookie's value to an endpoint, in one of two
-- modes (affinity-mode):
--
--   * persistent: the value is the md5 (hex) of "addr:port", the same in every
--     worker, across reloads and in both balancers; it stops matching once its
--     endpoint is gone (the session then starts again, with a new cookie).
--   * balanced: the value is a random key and a tag of the backend,
--     "<16 hex digits>.<8 hex digits of md5(backend name)>", and the endpoint is
--     where the consistent hash (chash) maps the whole value. The key never names
--     an endpoint, so when endpoints are added some sessions move to them (only to
--     them), and when one goes its sessions move, all without a new cookie. The tag
--     tells the primary's sessions from its canary's when both read one cookie
--     (affinity-canary-behavior sticky): a key would map onto either side.
local bit = require("bit")

local tohex = bit.tohex
local random = math.random

local _M = {}
local mt = { __index = _M }

-- a balanced cookie value; the capture is its tag
local BALANCED_VALUE = "^" .. string.rep("%x", 16) .. "%.(" .. string.rep("%x", 8) .. ")$"

-- Keys tried for a new balanced session before giving up on avoiding the peers a
-- request already failed on: with k of n peers tried, all of them miss with
-- probability (k/n)^32.
_M.NEW_KEY_TRIES = 32

-- opts: { md5 = fn(s) -> hex, balanced = bool, backend = its name (balanced),
-- ring = a chash over the same endpoints (balanced), random = fn(m, n) }
function _M.new(endpoints, opts)
    opts = opts or {}
    local md5 = opts.md5 or ngx.md5
    local self = { random = opts.random or random }
    if opts.balanced then
        self.balanced = true
        self.ring = opts.ring
        self.n = #endpoints
        self.tag = md5(opts.backend or ""):sub(1, 8)
    else
        local by_id = {}
        local ids = {}
        for i = 1, #endpoints do
            local ep = endpoints[i]
            local id = md5(ep.key)
            by_id[id] = ep
            ids[ep.key] = id
        end
        self.by_id, self.ids = by_id, ids
    end
    return setmetatable(self, mt)
end

-- The endpoint a cookie value stands for in this backend, or nil (no cookie, an
-- endpoint that is gone, a value of another mode or backend): a new session.
function _M.lookup(self, cookie_value)
    if not cookie_value or cookie_value == "" then
        return nil
    end
    if not self.balanced then
        return self.by_id[cookie_value]
    end
    if self.n == 0 or cookie_value:match(BALANCED_VALUE) ~= self.tag then
        return nil
    end
    return self.ring:pick(cookie_value)
end

-- The cookie value of an endpoint (persistent mode only).
function _M.id(self, ep)
    return self.ids[ep.key]
end

-- A new session: its endpoint and cookie value. rr: the round robin that spreads
-- persistent sessions; tried: a set of endpoint keys to avoid (a retry), or nil.
-- A balanced session takes the endpoint its random key maps to, as the key is all
-- the cookie keeps: nil when every key tried maps to a tried endpoint.
function _M.new_session(self, rr, tried)
    if not self.balanced then
        local ep = rr:pick(tried)
        return ep, ep and self.ids[ep.key]
    end
    if self.n == 0 then
        return nil
    end
    local rand = self.random
    for _ = 1, _M.NEW_KEY_TRIES do
        local value = tohex(rand(0, 0xffffffff), 8) .. tohex(rand(0, 0xffffffff), 8)
            .. "." .. self.tag
        local ep = self.ring:pick(value)
        if not tried or not tried[ep.key] then
            return ep, value
        end
    end
    return nil
end

-- Whether a browser keeps a cookie that says SameSite=None, by its User-Agent
-- (ingress-nginx's list; balancer/cases/samesite.json holds the cases): Chrome 40
-- to 69 and every browser on iOS or iPadOS 12 refuse it, and Safari on macOS
-- 10.14 takes it as Strict. Where ingress-nginx looks for "Chrome/4" anywhere in
-- the string, the major version is read.
function _M.takes_samesite_none(user_agent)
    if type(user_agent) ~= "string" then
        return true
    end
    local chrome = tonumber(user_agent:match("Chrome/(%d+)"))
    if chrome and chrome >= 40 and chrome <= 69 then
        return false
    end
    if user_agent:find("CPU iPhone OS 12_", 1, true)
        or user_agent:find("iPad; CPU OS 12_", 1, true) then
        return false
    end
    local mac_safari = user_agent:find("Macintosh", 1, true)
        and user_agent:find("Intel Mac OS X 10_14", 1, true)
        and user_agent:find("Safari", 1, true)
        and not user_agent:find("Chrome", 1, true)
    return not mac_safari
end

-- Set-Cookie value carrying `value`. affinity: { cookie_name, path, max_age,
-- expires, domain, secure, samesite, conditional_samesite_none }; default_path:
-- where affinity has no path of its own (the location's); https: whether the
-- request came over TLS (the cookie is Secure then, unless affinity.secure says
-- otherwise, as in ingress-nginx); now: seconds since the epoch, for Expires;
-- user_agent: the request's, for conditional_samesite_none.
function _M.cookie(affinity, value, default_path, https, now, user_agent)
    local parts = { affinity.cookie_name .. "=" .. value }
    parts[#parts + 1] = "Path=" .. (affinity.path or default_path or "/")
    if affinity.domain then
        parts[#parts + 1] = "Domain=" .. affinity.domain
    end
    if affinity.expires then
        parts[#parts + 1] = "Expires=" .. ngx.cookie_time(now + affinity.expires)
    end
    if affinity.max_age then
        parts[#parts + 1] = "Max-Age=" .. affinity.max_age
    end
    local secure = affinity.secure
    if secure == nil then
        secure = https
    end
    if secure then
        parts[#parts + 1] = "Secure"
    end
    parts[#parts + 1] = "HttpOnly"
    local samesite = affinity.samesite
    if samesite == "None" and affinity.conditional_samesite_none
        and not _M.takes_samesite_none(user_agent) then
        samesite = nil
    end
    if samesite then
        parts[#parts + 1] = "SameSite=" .. samesite
    end
    return table.concat(parts, "; ")
end

return _M
