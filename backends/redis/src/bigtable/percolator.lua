#!lua name=percolator_v1

-- Percolator's row transaction (the paper's Bigtable conditional mutation) as one atomic step
-- on one Redis Cluster slot. Loaded on every master by percolator-store/src/redis_backend/;
-- the protocol is in docs/design.md ("The Redis backend"), and this file mirrors
-- `cells::apply_row` operation for operation (a differential test keeps them equal).
--
-- Every key of one bucket shares a hash tag. A bucket's cells and its notify cells are each
-- one sorted set whose members are key ‖ value (score 0, so ZRANGE BYLEX orders them bytewise
-- like redb's keys: no key is a prefix of another, so a member sorts where its key does, and a
-- plain ZRANGE BYLEX reads keys and values without a function call). The metadata, whose keys
-- are free-form, is a sorted set of keys beside a hash of values. KEYS = cells zset, notify
-- zset (a bucket), or cells zset, cells hash, notify zset, notify hash (the metadata). The
-- client computes every key; this file never encodes one.
-- Timestamps are 8-byte big-endian strings compared bytewise: Lua numbers are doubles, and
-- Lua's `<` on strings uses the C locale's collation.

local ZERO = '\0\0\0\0\0\0\0\0'

-- a < b for two 8-byte big-endian timestamps
local function ts_lt(a, b)
  for j = 1, 8 do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then return x < y end
  end
  return false
end

-- The value of key k in the map (z, h): h given, a zset of keys and a hash of values; h nil,
-- a zset of key ‖ value members. Returns the value and (packed) the member, or false.
local function get(z, h, k)
  if h then return redis.call('HGET', h, k) end
  local m = redis.call('ZRANGE', z, '[' .. k, '+', 'BYLEX', 'LIMIT', 0, 1)[1]
  if m and string.sub(m, 1, #k) == k then return string.sub(m, #k + 1), m end
  return false
end

local function del(z, h, k)
  if h then
    redis.call('ZREM', z, k)
    redis.call('HDEL', h, k)
    return
  end
  local _, m = get(z, nil, k)
  if m then redis.call('ZREM', z, m) end
end

local function put(z, h, k, v)
  if h then
    redis.call('ZADD', z, 0, k)
    redis.call('HSET', h, k, v)
    return
  end
  del(z, nil, k)
  redis.call('ZADD', z, 0, k .. v)
end

-- A notify value: ts (8 bytes BE), then writers, each start_ts (8 bytes LE) and three
-- length-prefixed (u32 LE) strings. Returns ts and the writers as {start, blob}.
local function decode_notify(v)
  local ts = string.sub(v, 1, 8)
  local writers = {}
  local i, n = 9, #v
  while i <= n do
    local s = i
    i = i + 8
    for _ = 1, 3 do
      if i + 3 > n then error('percolator: corrupt notify value') end
      local len = struct.unpack('<I4', v, i)
      i = i + 4 + len
    end
    if i > n + 1 then error('percolator: corrupt notify value') end
    writers[#writers + 1] = { start = string.sub(v, s, s + 7), blob = string.sub(v, s, i - 1) }
  end
  return ts, writers
end

local function encode_notify(ts, writers)
  local parts = { ts }
  for _, w in ipairs(writers) do parts[#parts + 1] = w.blob end
  return table.concat(parts)
end

-- Arguments each operation tag takes (after the tag).
local ARGC = { L = 2, W = 2, A = 1, I = 1, P = 2, D = 1, N = 4, X = 2, C = 2, ['+'] = 2 }

local WRITE_ROLLBACK = 3

-- Returns what violates the condition at args[i] (tag, then its arguments), or nil.
local function check(cz, ch, index, args, i)
  local tag = args[i]
  if tag == 'L' then
    -- NoLock: any lock key in [from, to) (every version key of one cell has from's length).
    local from = args[i + 1]
    local r = redis.call('ZRANGE', cz, '[' .. from, '(' .. args[i + 2], 'BYLEX', 'LIMIT', 0, 1)
    if #r > 0 then
      if ch then return { index, 'lock', r[1], redis.call('HGET', ch, r[1]) } end
      return { index, 'lock', string.sub(r[1], 1, #from), string.sub(r[1], #from + 1) }
    end
  elseif tag == 'W' then
    -- NoWriteSince: a write record in [from, to) that is not a rollback, or any record at `to`
    -- (this transaction's own rollback record, at its start timestamp).
    local first, to = args[i + 1], args[i + 2]
    local from = '[' .. first
    while true do
      local r = redis.call('ZRANGE', cz, from, '(' .. to, 'BYLEX', 'LIMIT', 0, 64)
      if #r == 0 then break end
      if ch then
        local vs = redis.call('HMGET', ch, unpack(r))
        for j = 1, #r do
          if string.byte(vs[j], 1) ~= WRITE_ROLLBACK then return { index, 'write', r[j] } end
        end
      else
        for j = 1, #r do
          if string.byte(r[j], #first + 1) ~= WRITE_ROLLBACK then
            return { index, 'write', string.sub(r[j], 1, #first) }
          end
        end
      end
      from = '(' .. r[#r]
    end
    if get(cz, ch, to) then return { index, 'write', to } end
  elseif tag == 'A' then
    -- LockAbsent
    if get(cz, ch, args[i + 1]) then return { index, 'lockpresent' } end
  elseif tag == 'I' then
    -- LockIs
    if not get(cz, ch, args[i + 1]) then return { index, 'nolock' } end
  else
    error('percolator: unknown condition ' .. tostring(tag))
  end
  return nil
end

local function mutate(cz, ch, nz, nh, args, i)
  local tag = args[i]
  if tag == 'P' then
    put(cz, ch, args[i + 1], args[i + 2])
  elseif tag == 'D' then
    del(cz, ch, args[i + 1])
  elseif tag == '+' then
    -- MetaAdd: key, delta (8 bytes little-endian); the sum wraps like u64::wrapping_add.
    local k, delta = args[i + 1], args[i + 2]
    local current = get(cz, ch, k)
    if not current then current = string.rep('\0', 8) end
    if #current ~= 8 then
      error('percolator: corrupt counter ' .. k .. ' (' .. #current .. ' bytes, not 8)')
    end
    local out, carry = {}, 0
    for j = 1, 8 do
      local sum = current:byte(j) + delta:byte(j) + carry
      out[j] = string.char(sum % 256)
      carry = math.floor(sum / 256)
    end
    put(cz, ch, k, table.concat(out))
  elseif tag == 'N' then
    -- SetNotify: key, ts, writer start_ts ('' for none), writer blob
    local k, ts, start, blob = args[i + 1], args[i + 2], args[i + 3], args[i + 4]
    local v = get(nz, nh, k)
    local current, writers = nil, {}
    if v then current, writers = decode_notify(v) end
    if start ~= '' then
      for _, w in ipairs(writers) do
        if w.start == start then return end
      end
      writers[#writers + 1] = { start = start, blob = blob }
      put(nz, nh, k, encode_notify(current or ZERO, writers))
    elseif current == nil or ts_lt(current, ts) then
      put(nz, nh, k, encode_notify(ts, writers))
    end
  elseif tag == 'X' then
    -- DropNotifyWriter: key, writer start_ts
    local k, start = args[i + 1], args[i + 2]
    local v = get(nz, nh, k)
    if not v then return end
    local ts, writers = decode_notify(v)
    local kept = {}
    for _, w in ipairs(writers) do
      if w.start ~= start then kept[#kept + 1] = w end
    end
    if #kept ~= #writers then
      if #kept == 0 and ts == ZERO then
        del(nz, nh, k)
      else
        put(nz, nh, k, encode_notify(ts, kept))
      end
    end
  elseif tag == 'C' then
    -- ClearNotify: key, max_ts
    local k, max_ts = args[i + 1], args[i + 2]
    local v = get(nz, nh, k)
    if not v then return end
    local ts, writers = decode_notify(v)
    if not ts_lt(max_ts, ts) then
      if #writers == 0 then
        del(nz, nh, k)
      elseif ts ~= ZERO then
        put(nz, nh, k, encode_notify(ZERO, writers))
      end
    end
  else
    error('percolator: unknown mutation ' .. tostring(tag))
  end
end

-- Applies row operations in order, each atomically and independently (they share one slot, so
-- the whole call is one atomic step). ARGV: row count, then per row: condition count, mutation
-- count, the conditions, the mutations. Returns per row 0 (applied) or {index, found, ...}.
local function apply(keys, args)
  local cz, ch, nz, nh
  if #keys == 2 then
    cz, nz = keys[1], keys[2]
  else
    cz, ch, nz, nh = keys[1], keys[2], keys[3], keys[4]
  end
  local out = {}
  local i = 2
  for r = 1, tonumber(args[1]) do
    local nconds, nmuts = tonumber(args[i]), tonumber(args[i + 1])
    i = i + 2
    local failed = nil
    for c = 1, nconds do
      if failed == nil then failed = check(cz, ch, c - 1, args, i) end
      i = i + 1 + ARGC[args[i]]
    end
    for _ = 1, nmuts do
      if failed == nil then mutate(cz, ch, nz, nh, args, i) end
      i = i + 1 + ARGC[args[i]]
    end
    out[r] = failed or 0
  end
  return out
end

-- Applies the rows like `apply`, but as one all-or-nothing step: the conditions of every row
-- first (the rows are distinct), then, if all hold, the mutations of every row. Returns 0, or
-- {row, {index, found, ...}} for the first condition that does not hold (nothing applied).
local function apply_atomic(keys, args)
  local cz, nz = keys[1], keys[2]
  local starts = {}
  local i = 2
  for r = 1, tonumber(args[1]) do
    local nconds, nmuts = tonumber(args[i]), tonumber(args[i + 1])
    i = i + 2
    for c = 1, nconds do
      local failed = check(cz, nil, c - 1, args, i)
      if failed then return { r - 1, failed } end
      i = i + 1 + ARGC[args[i]]
    end
    starts[r] = { i, nmuts }
    for _ = 1, nmuts do
      i = i + 1 + ARGC[args[i]]
    end
  end
  for _, s in ipairs(starts) do
    local j = s[1]
    for _ = 1, s[2] do
      mutate(cz, nil, nz, nil, args, j)
      j = j + 1 + ARGC[args[j]]
    end
  end
  return 0
end

-- Up to `limit` entries of a zset+hash pair (the metadata) in [from, to) (ZRANGE BYLEX
-- bounds), as a flat list key, value, key, value, ... (A bucket's packed sorted sets are read
-- with a plain ZRANGE.)
local function range(keys, args)
  local ks = redis.call('ZRANGE', keys[1], args[1], args[2], 'BYLEX', 'LIMIT', 0, tonumber(args[3]))
  if #ks == 0 then return {} end
  local vs = redis.call('HMGET', keys[2], unpack(ks))
  local out = {}
  for j = 1, #ks do
    out[2 * j - 1] = ks[j]
    out[2 * j] = vs[j]
  end
  return out
end

-- Releases a scanner's row lock (KEYS[1]) if it still holds the owner ARGV[1]: a lock that
-- expired and was taken by another scanner stays theirs.
local function unlock_row(keys, args)
  if redis.call('GET', keys[1]) == args[1] then
    return redis.call('DEL', keys[1])
  end
  return 0
end

redis.register_function('percolator_apply', apply)
redis.register_function('percolator_apply_atomic', apply_atomic)
redis.register_function('percolator_unlock_row', unlock_row)
redis.register_function { function_name = 'percolator_range', callback = range, flags = { 'no-writes' } }
