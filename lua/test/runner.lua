-- Minimal unit test runner, driven through NGINX (content_by_lua).
-- Each lua/test/unit/*.lua returns a table { ["test name"] = function(t) end }.
-- t offers eq(a, b, msg), ok(cond, msg), near(a, b, tol, msg).
local _M = {}

local function fmt(v)
    if type(v) == "string" then
        return string.format("%q", v)
    end
    return tostring(v)
end

local T = {}
function T.ok(cond, msg)
    if not cond then
        error(msg or "assertion failed", 2)
    end
end
function T.eq(a, b, msg)
    if a ~= b then
        error((msg and msg .. ": " or "") .. "expected " .. fmt(b) .. ", got " .. fmt(a), 2)
    end
end
function T.near(a, b, tol, msg)
    if math.abs(a - b) > tol then
        error((msg and msg .. ": " or "") .. "expected " .. fmt(b) .. " ± " .. tol
              .. ", got " .. fmt(a), 2)
    end
end

function _M.run(dir)
    ngx.header["Content-Type"] = "text/plain"
    local out = {}
    local function say(...)
        out[#out + 1] = table.concat({ ... })
    end
    local p = io.popen("ls -1 '" .. dir .. "'/*.lua 2>/dev/null")
    local files = {}
    for f in p:lines() do
        files[#files + 1] = f
    end
    p:close()
    local passed, failed = 0, 0
    for _, file in ipairs(files) do
        local short = file:match("([^/]+)$")
        local chunk, err = loadfile(file)
        local suite = chunk and select(2, pcall(chunk))
        if type(suite) ~= "table" then
            failed = failed + 1
            say("not ok - ", short, ": cannot load: ", tostring(err or suite))
        else
            local names = {}
            for name in pairs(suite) do
                names[#names + 1] = name
            end
            table.sort(names)
            for _, name in ipairs(names) do
                local ok, terr = pcall(suite[name], T)
                if ok then
                    passed = passed + 1
                    say("ok - ", short, ": ", name)
                else
                    failed = failed + 1
                    say("not ok - ", short, ": ", name, ": ", tostring(terr))
                end
            end
        end
    end
    say("# passed ", passed, " failed ", failed)
    if failed > 0 or passed == 0 then
        ngx.status = 500
    end
    ngx.print(table.concat(out, "\n"), "\n")
end

return _M
