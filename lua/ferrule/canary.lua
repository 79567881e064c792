-- Canary decision, ingress-nginx semantics. Pure.
-- policy: { header, header_value, cookie, weight, weight_total }
-- header_val / cookie_val: the request's values (or nil)
-- rand(n): integer in 1..n (math.random)
local _M = {}

function _M.decide(policy, header_val, cookie_val, rand)
    if policy.header and header_val then
        if policy.header_value then
            if header_val == policy.header_value then
                return true
            end
            -- any other value: ignored, fall through to cookie and weight
        elseif header_val == "always" then
            return true
        elseif header_val == "never" then
            return false
        end
    end
    if policy.cookie and cookie_val then
        if cookie_val == "always" then
            return true
        elseif cookie_val == "never" then
            return false
        end
    end
    local w = policy.weight or 0
    if w > 0 then
        local total = policy.weight_total or 100
        if w >= total then
            return true
        end
        return (rand or math.random)(total) <= w
    end
    return false
end

-- "X-Canary" -> "http_x_canary" (the nginx variable name)
function _M.header_var(header)
    return "http_" .. header:lower():gsub("-", "_")
end

return _M
