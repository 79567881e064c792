-- Cookie affinity: maps an opaque, stable cookie value to an endpoint.
-- The id is the md5 (hex) of "addr:port", so it is the same in every worker
-- and across reloads, and it stops matching once the endpoint is gone.
local _M = {}
local mt = { __index = _M }

-- opts: { md5 = fn(s) -> hex }
function _M.new(endpoints, opts)
    opts = opts or {}
    local md5 = opts.md5 or ngx.md5
    local by_id = {}
    local ids = {}
    for i = 1, #endpoints do
        local ep = endpoints[i]
        local id = md5(ep.key)
        by_id[id] = ep
        ids[ep.key] = id
    end
    return setmetatable({ by_id = by_id, ids = ids }, mt)
end

function _M.lookup(self, cookie_value)
    if not cookie_value or cookie_value == "" then
        return nil
    end
    return self.by_id[cookie_value]
end

function _M.id(self, ep)
    return self.ids[ep.key]
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

-- Set-Cookie value for an endpoint. affinity: { cookie_name, path, max_age,
-- expires, domain, secure, samesite, conditional_samesite_none }; default_path:
-- where affinity has no path of its own (the location's); https: whether the
-- request came over TLS (the cookie is Secure then, unless affinity.secure says
-- otherwise, as in ingress-nginx); now: seconds since the epoch, for Expires;
-- user_agent: the request's, for conditional_samesite_none.
function _M.cookie(self, affinity, ep, default_path, https, now, user_agent)
    local parts = { affinity.cookie_name .. "=" .. self.ids[ep.key] }
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
