-- placeholder
select 1;
