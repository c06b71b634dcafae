-- redis-lease: every field of INFO lease for redis_exporter's -script option.
--   prometheus-redis-exporter -redis.addr redis://127.0.0.1:6379 -script monitoring/lease.lua
-- redis_exporter exports each returned pair as redis_script_values{key="..."}. Plain fields
-- keep their INFO names (lease_holders, lease_grants_write, ...); each histogram
-- (lease_wait_bucket_ms:1=N,...,inf=N) becomes one key per bucket, lease_wait_bucket_ms_le_1
-- ... lease_wait_bucket_ms_le_+Inf, which monitoring/prometheus.yml's relabeling turns into a
-- Prometheus histogram (lease_wait_ms_bucket{le="..."}, with lease_wait_ms_count/_sum).
-- Keys and values are strings, as redis_exporter wants them; fields that are not numbers
-- (lease_acl_categories) are left out, since a gauge holds a number.
local out = {}
local info = redis.call("INFO", "lease")
for line in string.gmatch(info, "[^\r\n]+") do
  local name, value = string.match(line, "^(lease_[%w_]+):(.*)$")
  if name then
    if string.find(value, "=", 1, true) then
      for k, v in string.gmatch(value, "([^,=]+)=([^,]+)") do
        if k == "inf" then k = "+Inf" end
        table.insert(out, name .. "_le_" .. k)
        table.insert(out, v)
      end
    elseif tonumber(value) ~= nil then
      table.insert(out, name)
      table.insert(out, value)
    end
  end
end
return out
