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

-- Set-Cookie value for an endpoint. affinity: { cookie_name, path, max_age };
-- default_path: where affinity has no path of its own (the location's).
function _M.cookie(self, affinity, ep, default_path)
    local parts = { affinity.cookie_name .. "=" .. self.ids[ep.key] }
    parts[#parts + 1] = "Path=" .. (affinity.path or default_path or "/")
    if affinity.max_age then
        parts[#parts + 1] = "Max-Age=" .. affinity.max_age
    end
    parts[#parts + 1] = "HttpOnly"
    return table.concat(parts, "; ")
end

return _M
