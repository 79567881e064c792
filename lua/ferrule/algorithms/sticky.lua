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

-- Set-Cookie value for an endpoint. affinity: { cookie_name, path, max_age,
-- expires, domain, secure, samesite }; default_path: where affinity has no path
-- of its own (the location's); https: whether the request came over TLS (the
-- cookie is Secure then, unless affinity.secure says otherwise, as in
-- ingress-nginx); now: seconds since the epoch, for Expires.
function _M.cookie(self, affinity, ep, default_path, https, now)
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
    if affinity.samesite then
        parts[#parts + 1] = "SameSite=" .. affinity.samesite
    end
    return table.concat(parts, "; ")
end

return _M
