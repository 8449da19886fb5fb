package srvprof;

import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelFuture;
import io.netty.channel.ChannelFutureListener;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.http.DefaultFullHttpResponse;
import io.netty.handler.codec.http.FullHttpResponse;
import io.netty.handler.codec.http.HttpHeaderNames;
import io.netty.handler.codec.http.HttpHeaderValues;
import io.netty.handler.codec.http.HttpObject;
import io.netty.handler.codec.http.HttpRequest;
import io.netty.handler.codec.http.HttpResponseStatus;
import io.netty.handler.codec.http.HttpServerCodec;
import io.netty.handler.codec.http.HttpUtil;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * srvprof reference server: Netty's HTTP codec (HttpServerCodec) with a handler
 * writing a fixed FullHttpResponse, as the study's trimmed Netty HTTP server.
 *
 * <pre>
 * usage: java -jar hello-netty.jar --port PORT [--backlog N] [--workers N] [--no-keepalive]
 *                                  [--gc-every N --live-mb M]
 *   GET /      -> "hello world" (11 bytes)
 *   GET /512b  -> 511 x 'a' + '\n' (512 bytes)
 * </pre>
 *
 * With --gc-every N, every Nth GET / has a thread of its own call System.gc(): a full,
 * stop-the-world collection of a heap holding M MiB of small live objects (--live-mb),
 * during which every Java thread, the event loops included, stands still at a safepoint.
 *
 * NIO transport; one boss (acceptor) thread, --workers worker event-loop threads
 * (default: Netty's default, 2 x available CPUs). Listens on 127.0.0.1 only.
 */
public final class HelloNetty {
    static final byte[] HELLO = "hello world".getBytes(StandardCharsets.US_ASCII);
    static final byte[] BODY_512 = ("a".repeat(511) + "\n").getBytes(StandardCharsets.US_ASCII);
    static final byte[] NOT_FOUND = "not found\n".getBytes(StandardCharsets.US_ASCII);
    static long gcEvery;
    static final AtomicLong served = new AtomicLong();
    static final AtomicBoolean collecting = new AtomicBoolean();
    /** Live objects a full collection must mark and move (kept reachable). */
    static final List<long[]> live = new ArrayList<>();

    /** After every gcEvery'th GET /, a full collection on a thread of its own, one at a time. */
    static void maybeCollect() {
        if (gcEvery <= 0 || served.incrementAndGet() % gcEvery != 0 || !collecting.compareAndSet(false, true)) {
            return;
        }
        Thread t = new Thread(() -> {
            System.gc();
            collecting.set(false);
        }, "srvprof-gc");
        t.setDaemon(true);
        t.start();
    }

    public static void main(String[] args) throws Exception {
        int port = 0, backlog = 511, workers = 0, liveMb = 0;
        boolean keepAlive = true;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--backlog": backlog = Integer.parseInt(args[++i]); break;
                case "--workers": workers = Integer.parseInt(args[++i]); break;
                case "--no-keepalive": keepAlive = false; break;
                case "--gc-every": gcEvery = Long.parseLong(args[++i]); break;
                case "--live-mb": liveMb = Integer.parseInt(args[++i]); break;
                default:
                    System.err.println("hello-netty: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (port <= 0 || port > 65535) {
            System.err.println("usage: hello-netty --port PORT [--backlog N] [--workers N] [--no-keepalive]");
            System.exit(2);
        }
        // 16 longs (144 bytes with the header) an object.
        for (long n = (long) liveMb << 20; n > 0; n -= 144) {
            live.add(new long[16]);
        }
        final boolean ka = keepAlive;
        EventLoopGroup boss = new NioEventLoopGroup(1);
        EventLoopGroup worker = workers > 0 ? new NioEventLoopGroup(workers) : new NioEventLoopGroup();
        try {
            ServerBootstrap b = new ServerBootstrap()
                    .group(boss, worker)
                    .channel(NioServerSocketChannel.class)
                    .option(ChannelOption.SO_BACKLOG, backlog)
                    .option(ChannelOption.SO_REUSEADDR, true)
                    .childOption(ChannelOption.TCP_NODELAY, true)
                    .childHandler(new ChannelInitializer<SocketChannel>() {
                        @Override
                        protected void initChannel(SocketChannel ch) {
                            ch.pipeline().addLast(new HttpServerCodec(), new Handler(ka));
                        }
                    });
            ChannelFuture bound = b.bind("127.0.0.1", port);
            bound.await();
            if (!bound.isSuccess()) {
                System.err.println("hello-netty: bind 127.0.0.1:" + port + ": " + bound.cause());
                System.exit(1);
            }
            bound.channel().closeFuture().sync();
        } finally {
            boss.shutdownGracefully();
            worker.shutdownGracefully();
        }
    }

    static final class Handler extends SimpleChannelInboundHandler<HttpObject> {
        private final boolean keepAliveEnabled;

        Handler(boolean keepAliveEnabled) {
            this.keepAliveEnabled = keepAliveEnabled;
        }

        @Override
        public void channelReadComplete(ChannelHandlerContext ctx) {
            ctx.flush();
        }

        @Override
        protected void channelRead0(ChannelHandlerContext ctx, HttpObject msg) {
            if (!(msg instanceof HttpRequest)) {
                return; // request body chunks / LastHttpContent: ignored
            }
            HttpRequest req = (HttpRequest) msg;
            String uri = req.uri();
            int q = uri.indexOf('?');
            String path = q < 0 ? uri : uri.substring(0, q);
            byte[] body;
            HttpResponseStatus status = HttpResponseStatus.OK;
            if (path.equals("/")) {
                body = HELLO;
                maybeCollect();
            } else if (path.equals("/512b")) {
                body = BODY_512;
            } else {
                body = NOT_FOUND;
                status = HttpResponseStatus.NOT_FOUND;
            }
            boolean keepAlive = keepAliveEnabled && HttpUtil.isKeepAlive(req);
            ByteBuf content = Unpooled.wrappedBuffer(body);
            FullHttpResponse resp = new DefaultFullHttpResponse(req.protocolVersion(), status, content);
            resp.headers()
                    .set(HttpHeaderNames.CONTENT_TYPE, HttpHeaderValues.TEXT_PLAIN)
                    .setInt(HttpHeaderNames.CONTENT_LENGTH, body.length);
            if (keepAlive) {
                if (!req.protocolVersion().isKeepAliveDefault()) {
                    resp.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.KEEP_ALIVE);
                }
                ctx.write(resp);
            } else {
                resp.headers().set(HttpHeaderNames.CONNECTION, HttpHeaderValues.CLOSE);
                ctx.write(resp).addListener(ChannelFutureListener.CLOSE);
            }
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            ctx.close();
        }
    }
}
