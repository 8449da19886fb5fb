%% srvprof reference server: Erlang/OTP hello world on gen_tcp (study 1).
%%
%% One Erlang process per connection, minimal HTTP/1.1: read until
%% "\r\n\r\n", take the request target from the request line, honour
%% "Connection: close" / HTTP/1.0 keep-alive rules, pipelined requests are
%% answered in order. Request bodies are not supported (GET only).
%%   GET /      -> "hello world" (11 bytes)
%%   GET /512b  -> 511 x 'a' + '\n' (512 bytes)
%% Started by servers/erlang/run as:
%%   erl -noshell -noinput [+S N:N] -pa build -run hello_erl main PORT BACKLOG KEEPALIVE(1|0)
-module(hello_erl).
-export([main/1, acceptor/2]).

-define(MAX_HEAD, 16384).

main([PortS, BacklogS, KeepAliveS]) ->
    Port = list_to_integer(PortS),
    Backlog = list_to_integer(BacklogS),
    KeepAlive = KeepAliveS =:= "1",
    Opts = [binary, {packet, raw}, {active, false}, {reuseaddr, true},
            {ip, {127, 0, 0, 1}}, {backlog, Backlog}, {nodelay, true}],
    persistent_term:put(?MODULE, build_responses()),
    case gen_tcp:listen(Port, Opts) of
        {ok, Listen} ->
            %% One acceptor per scheduler; each accepted connection becomes its
            %% own process (the acceptor hands over to a fresh acceptor).
            [spawn(?MODULE, acceptor, [Listen, KeepAlive])
             || _ <- lists:seq(1, erlang:system_info(schedulers_online))],
            %% This process owns the listen socket: keep it alive.
            receive stop -> ok end;
        {error, Reason} ->
            io:format(standard_error, "hello_erl: listen 127.0.0.1:~b: ~p~n", [Port, Reason]),
            erlang:halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: hello_erl main PORT BACKLOG KEEPALIVE~n", []),
    erlang:halt(2).

acceptor(Listen, KeepAlive) ->
    case gen_tcp:accept(Listen) of
        {ok, Sock} ->
            spawn(?MODULE, acceptor, [Listen, KeepAlive]),
            conn(Sock, <<>>, KeepAlive);
        {error, closed} ->
            ok;
        {error, Reason} ->
            %% emfile and the like: report, back off, keep accepting.
            io:format(standard_error, "hello_erl: accept: ~p~n", [Reason]),
            timer:sleep(10),
            acceptor(Listen, KeepAlive)
    end.

conn(Sock, Buf, KeepAlive) ->
    case binary:match(Buf, <<"\r\n\r\n">>) of
        nomatch when byte_size(Buf) > ?MAX_HEAD ->
            gen_tcp:close(Sock);
        nomatch ->
            case gen_tcp:recv(Sock, 0) of
                {ok, Data} -> conn(Sock, <<Buf/binary, Data/binary>>, KeepAlive);
                {error, _} -> gen_tcp:close(Sock)
            end;
        {Pos, 4} ->
            <<Head:Pos/binary, _:4/binary, Rest/binary>> = Buf,
            {Path, ClientKeepAlive} = parse_head(Head),
            Keep = KeepAlive andalso ClientKeepAlive,
            case gen_tcp:send(Sock, response(Path, Keep)) of
                ok when Keep -> conn(Sock, Rest, KeepAlive);
                _ -> gen_tcp:close(Sock)
            end
    end.

%% -> {Path | bad, KeepAlive}
parse_head(Head) ->
    [RequestLine | Headers] = binary:split(Head, <<"\r\n">>, [global]),
    case binary:split(RequestLine, <<" ">>, [global]) of
        [_Method, Target, Version] ->
            [Path | _] = binary:split(Target, <<"?">>),
            Default = Version =:= <<"HTTP/1.1">>,
            {Path, connection_keepalive(Headers, Default)};
        _ ->
            {bad, false}
    end.

connection_keepalive([], Default) ->
    Default;
connection_keepalive([H | T], Default) ->
    case binary:split(H, <<":">>) of
        [Name, Value] ->
            case string:lowercase(Name) of
                <<"connection">> ->
                    case string:lowercase(string:trim(Value)) of
                        <<"close">> -> false;
                        <<"keep-alive">> -> true;
                        _ -> connection_keepalive(T, Default)
                    end;
                _ ->
                    connection_keepalive(T, Default)
            end;
        _ ->
            connection_keepalive(T, Default)
    end.

%% All responses are built once at startup and kept in persistent_term.
build_responses() ->
    Body512 = <<(binary:copy(<<"a">>, 511))/binary, "\n">>,
    Bodies = [{<<"/">>, <<"200 OK">>, <<"hello world">>},
              {<<"/512b">>, <<"200 OK">>, Body512},
              {notfound, <<"404 Not Found">>, <<"not found\n">>},
              {bad, <<"400 Bad Request">>, <<"bad request\n">>}],
    maps:from_list(
      [{{Path, Keep}, response_bin(Status, Body, Keep)}
       || {Path, Status, Body} <- Bodies, Keep <- [true, false]]).

response_bin(Status, Body, Keep) ->
    Conn = case Keep of true -> <<"keep-alive">>; false -> <<"close">> end,
    Len = integer_to_binary(byte_size(Body)),
    <<"HTTP/1.1 ", Status/binary, "\r\nServer: srvprof-erlang\r\nContent-Type: text/plain\r\n"
      "Content-Length: ", Len/binary, "\r\nConnection: ", Conn/binary, "\r\n\r\n", Body/binary>>.

response(Path, Keep) ->
    Responses = persistent_term:get(?MODULE),
    case Responses of
        #{{Path, Keep} := R} -> R;
        #{} -> maps:get({notfound, Keep}, Responses)
    end.
