#!lua name=percolator_v1

-- Percolator's row transaction (the paper's Bigtable conditional mutation) as one atomic step
-- on one Redis Cluster slot. Loaded on every master by percolator-store/src/redis_backend/;
-- the protocol is in docs/design.md ("The Redis backend"), and this file mirrors
-- `cells::apply_row` operation for operation (a differential test keeps them equal).
--
-- Every key of one bucket shares a hash tag: KEYS = cells zset, cells hash, notify zset,
-- notify hash. A zset holds the keys (score 0, so ZRANGE BYLEX orders them bytewise like
-- redb), the hash holds the values. The client computes every key; this file never encodes one.
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
    -- NoLock: any lock key in [from, to).
    local r = redis.call('ZRANGE', cz, '[' .. args[i + 1], '(' .. args[i + 2], 'BYLEX', 'LIMIT', 0, 1)
    if #r > 0 then return { index, 'lock', r[1], redis.call('HGET', ch, r[1]) } end
  elseif tag == 'W' then
    -- NoWriteSince: a write record in [from, to) that is not a rollback, or any record at `to`
    -- (this transaction's own rollback record, at its start timestamp).
    local from, to = '[' .. args[i + 1], args[i + 2]
    while true do
      local r = redis.call('ZRANGE', cz, from, '(' .. to, 'BYLEX', 'LIMIT', 0, 64)
      if #r == 0 then break end
      local vs = redis.call('HMGET', ch, unpack(r))
      for j = 1, #r do
        if string.byte(vs[j], 1) ~= WRITE_ROLLBACK then return { index, 'write', r[j] } end
      end
      from = '(' .. r[#r]
    end
    if redis.call('HEXISTS', ch, to) == 1 then return { index, 'write', to } end
  elseif tag == 'A' then
    -- LockAbsent
    if redis.call('HEXISTS', ch, args[i + 1]) == 1 then return { index, 'lockpresent' } end
  elseif tag == 'I' then
    -- LockIs
    if redis.call('HEXISTS', ch, args[i + 1]) == 0 then return { index, 'nolock' } end
  else
    error('percolator: unknown condition ' .. tostring(tag))
  end
  return nil
end

local function mutate(cz, ch, nz, nh, args, i)
  local tag = args[i]
  if tag == 'P' then
    redis.call('ZADD', cz, 0, args[i + 1])
    redis.call('HSET', ch, args[i + 1], args[i + 2])
  elseif tag == 'D' then
    redis.call('ZREM', cz, args[i + 1])
    redis.call('HDEL', ch, args[i + 1])
  elseif tag == '+' then
    -- MetaAdd: key, delta (8 bytes little-endian); the sum wraps like u64::wrapping_add.
    local k, delta = args[i + 1], args[i + 2]
    local current = redis.call('HGET', ch, k)
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
    redis.call('ZADD', cz, 0, k)
    redis.call('HSET', ch, k, table.concat(out))
  elseif tag == 'N' then
    -- SetNotify: key, ts, writer start_ts ('' for none), writer blob
    local k, ts, start, blob = args[i + 1], args[i + 2], args[i + 3], args[i + 4]
    local v = redis.call('HGET', nh, k)
    local current, writers = nil, {}
    if v then current, writers = decode_notify(v) end
    if start ~= '' then
      for _, w in ipairs(writers) do
        if w.start == start then return end
      end
      writers[#writers + 1] = { start = start, blob = blob }
      redis.call('ZADD', nz, 0, k)
      redis.call('HSET', nh, k, encode_notify(current or ZERO, writers))
    elseif current == nil or ts_lt(current, ts) then
      redis.call('ZADD', nz, 0, k)
      redis.call('HSET', nh, k, encode_notify(ts, writers))
    end
  elseif tag == 'X' then
    -- DropNotifyWriter: key, writer start_ts
    local k, start = args[i + 1], args[i + 2]
    local v = redis.call('HGET', nh, k)
    if not v then return end
    local ts, writers = decode_notify(v)
    local kept = {}
    for _, w in ipairs(writers) do
      if w.start ~= start then kept[#kept + 1] = w end
    end
    if #kept ~= #writers then
      if #kept == 0 and ts == ZERO then
        redis.call('ZREM', nz, k)
        redis.call('HDEL', nh, k)
      else
        redis.call('HSET', nh, k, encode_notify(ts, kept))
      end
    end
  elseif tag == 'C' then
    -- ClearNotify: key, max_ts
    local k, max_ts = args[i + 1], args[i + 2]
    local v = redis.call('HGET', nh, k)
    if not v then return end
    local ts, writers = decode_notify(v)
    if not ts_lt(max_ts, ts) then
      if #writers == 0 then
        redis.call('ZREM', nz, k)
        redis.call('HDEL', nh, k)
      elseif ts ~= ZERO then
        redis.call('HSET', nh, k, encode_notify(ZERO, writers))
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
  local cz, ch, nz, nh = keys[1], keys[2], keys[3], keys[4]
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

-- Up to `limit` entries of a zset+hash pair in [from, to) (ZRANGE BYLEX bounds), as a flat
-- list key, value, key, value, ...
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
redis.register_function('percolator_unlock_row', unlock_row)
redis.register_function { function_name = 'percolator_range', callback = range, flags = { 'no-writes' } }
