-- Test helper: brings a shared dict to the state where a write of a bigger
-- value fails with "no memory" (unit tests of failed writes).
local _M = {}

-- Fills every free page and slab slot, largest values first, then frees a
-- few of the smallest slots: the writers still need room for the small
-- entries they touch on the way (the store's lock, numbers), but nothing
-- bigger than a 128-byte slot (the 30-byte values' size class) fits anywhere.
function _M.fill(d)
    local i, small = 0, {}
    for _, size in ipairs({ 4000, 2000, 1000, 500, 250, 120, 60, 30 }) do
        local value = string.rep("x", size)
        while true do
            i = i + 1
            local key = "fill:" .. i
            if not d:safe_set(key, value) then
                break
            end
            if size == 30 then
                small[#small + 1] = key
            end
        end
    end
    assert(#small >= 4, "the dict did not fill up with small values")
    for k = #small - 3, #small do
        d:delete(small[k])
    end
end

-- Runs fn(d) with module.DICT pointed at the small test dict `d` (emptied before
-- and after), and the module's own dict restored whatever fn does.
function _M.with_small_dict(module, fn)
    local saved = module.DICT
    module.DICT = "ferrule_test_small"
    local d = ngx.shared.ferrule_test_small
    d:flush_all()
    d:flush_expired()
    local ok, err = pcall(fn, d)
    module.DICT = saved
    d:flush_all()
    d:flush_expired()
    if not ok then
        error(err, 0)
    end
end

return _M
