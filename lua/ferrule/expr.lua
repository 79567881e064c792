-- NGINX variable expressions such as "$request_uri", "$arg_user$http_x_a" or
-- "${host}-x". parse() runs once per backend change; eval() per request.
local concat = table.concat
local sub = string.sub
local find = string.find

local _M = {}

-- Returns an array of parts: { literal = "..." } or { var = "name" }.
function _M.parse(s)
    if type(s) ~= "string" then
        return nil, "expression must be a string"
    end
    local parts = {}
    local i, n = 1, #s
    while i <= n do
        local d = find(s, "$", i, true)
        if not d then
            parts[#parts + 1] = { literal = sub(s, i) }
            break
        end
        if d > i then
            parts[#parts + 1] = { literal = sub(s, i, d - 1) }
        end
        local name, stop
        if sub(s, d + 1, d + 1) == "{" then
            local close = find(s, "}", d + 2, true)
            if not close then
                return nil, "unterminated ${ in " .. s
            end
            name = sub(s, d + 2, close - 1)
            stop = close
        else
            local a, b = find(s, "^[%w_]+", d + 1)
            if a then
                name = sub(s, a, b)
                stop = b
            end
        end
        if not name or not name:match("^[%w_]+$") then
            return nil, "invalid variable name after $ in " .. s
        end
        parts[#parts + 1] = { var = name:lower() }
        i = stop + 1
    end
    return parts
end

-- get(name) returns the variable value or nil (nil becomes "").
function _M.eval(parts, get)
    if #parts == 1 then
        local p = parts[1]
        if p.literal then
            return p.literal
        end
        return get(p.var) or ""
    end
    local buf = {}
    for k = 1, #parts do
        local p = parts[k]
        buf[k] = p.literal or get(p.var) or ""
    end
    return concat(buf)
end

return _M
